package broker

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/storage"
)

// fsm is the broker group's Raft state machine: the store (commitlog,
// consume queues, index) and the metadata. The store is persistent, so
// applying is idempotent: an entry at or below the store's last Raft index
// changed the store already and only its metadata part is applied again
// (metadata is rebuilt from the snapshot plus the log on every start).
type fsm struct {
	store *storage.Store
	meta  *metadata
	log   *slog.Logger
	// appended is told about every send batch stored (the broker wakes held
	// pulls from it when it is the master).
	appended func(msgs []*pb.StoredMessage, res []storage.AppendResult)
	// catchUp copies the commitlog from a peer up to what a snapshot says
	// (see catchup.go).
	catchUp func(snap *pb.BrokerSnapshot) error
}

// applyResult is what Apply returns for a send entry; the leader hands it
// back to the senders.
type applyResult struct {
	results []storage.AppendResult
	err     error
}

func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var cmd pb.RaftCommand
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		f.log.Error("undecodable raft entry", "index", l.Index, "err", err)
		return &applyResult{err: fmt.Errorf("broker: raft entry %d: %w", l.Index, err)}
	}
	// Store side effects of an entry at or below what the store holds
	// happened before the restart.
	fresh := l.Index > f.store.LastRaftIndex()
	switch c := cmd.Command.(type) {
	case *pb.RaftCommand_Send:
		if !fresh {
			f.meta.setScheduleOffsets(c.Send.ScheduleOffsets)
			return &applyResult{}
		}
		r := f.applySend(l.Index, c.Send)
		if r.err == nil {
			f.meta.setScheduleOffsets(c.Send.ScheduleOffsets)
		}
		return r
	case *pb.RaftCommand_UpsertTopic:
		f.meta.upsertTopic(c.UpsertTopic)
	case *pb.RaftCommand_DeleteTopic:
		f.meta.deleteTopic(c.DeleteTopic)
		if fresh {
			if err := f.store.DeleteTopic(c.DeleteTopic); err != nil {
				f.log.Error("delete topic from store", "topic", c.DeleteTopic, "err", err)
			}
		}
	case *pb.RaftCommand_CommitOffsets:
		f.meta.commitOffsets(c.CommitOffsets)
	case *pb.RaftCommand_UpsertGroup:
		f.meta.upsertGroup(c.UpsertGroup)
	case *pb.RaftCommand_DeleteGroup:
		f.meta.deleteGroup(c.DeleteGroup)
	case *pb.RaftCommand_Announce:
		f.meta.announce(c.Announce)
	default:
		f.log.Error("unknown raft command", "index", l.Index)
	}
	return nil
}

func (f *fsm) applySend(index uint64, b *pb.SendBatch) *applyResult {
	msgs := make([]storage.Message, len(b.Messages))
	for i, sm := range b.Messages {
		m := sm.Message
		msgs[i] = storage.Message{
			Topic:      m.Topic,
			QueueID:    sm.QueueId,
			Flag:       m.Flag,
			Tags:       m.Tags,
			Keys:       m.Keys,
			Properties: m.Properties,
			Body:       m.Body,
			BornTime:   m.BornTimestamp,
			StoreTime:  b.StoreTimestamp,
		}
	}
	res, err := f.store.Append(index, msgs)
	if err != nil {
		// Every replica refuses the same entry the same way (the master
		// checked the messages before proposing, so this is a store
		// failure, and the replica stops taking writes).
		f.log.Error("append to store failed", "index", index, "err", err)
		return &applyResult{err: err}
	}
	if f.appended != nil {
		f.appended(b.Messages, res)
	}
	return &applyResult{results: res}
}

// Snapshot captures the metadata and how far the store is; the commitlog
// itself is not in the snapshot (a replica that needs it copies it from a
// peer).
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	s := &pb.BrokerSnapshot{StoreRaftIndex: f.store.LastRaftIndex()}
	_, s.CommitlogMaxOffset = f.store.CommitlogOffsets()
	f.meta.snapshot(s)
	return &fsmSnapshot{snap: s, store: f.store}, nil
}

// Restore replaces the metadata with the snapshot's and, when the store is
// behind what the snapshot describes, copies the missing commitlog from a
// peer.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("broker: read snapshot: %w", err)
	}
	var s pb.BrokerSnapshot
	if err := proto.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("broker: decode snapshot: %w", err)
	}
	f.meta.restore(&s)
	if s.StoreRaftIndex > f.store.LastRaftIndex() {
		if f.catchUp == nil {
			return errors.New("broker: store is behind the snapshot and cannot catch up")
		}
		return f.catchUp(&s)
	}
	return nil
}

type fsmSnapshot struct {
	snap  *pb.BrokerSnapshot
	store *storage.Store
}

// Persist makes the store durable up to (at least) the snapshot before the
// snapshot exists: once it does, Raft may drop the log entries it covers.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	err := s.store.Flush()
	var data []byte
	if err == nil {
		data, err = proto.Marshal(s.snap)
	}
	if err == nil {
		_, err = sink.Write(data)
	}
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("broker: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
