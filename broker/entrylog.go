package broker

import (
	"errors"
	"fmt"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/storage"
)

// The commitlog as the Raft log (docs/commitlog-raft-log.md): with
// storage.Config.RaftLog the replica's Raft member keeps its log in the
// store (cluster.RaftConfig.EntryLog), each entry's records where
// consumers read them, and the state machine dispatches what Raft stored
// instead of writing it again (fsm.go, dispatchMode). A snapshot records
// where its own Raft entry ends in the commitlog, and a replica that
// installs one copies a peer's commitlog to there (fsm.install): Raft's
// own entries never reach the state machine, so that end may lie past
// what the state machine dispatched. A DeleteTopic entry is stored
// naming the topic (deletedTopic), so that sends stored after it and
// before it applies are numbered from 0 on every replica. A new replica's
// default (raftmq broker --raft-log auto, Config.RaftLogFromDir); a WAL
// member moves its log into the commitlog only with its group
// (raftlogmove.go, raftlogconvert.go), and a group keeps its replicas'
// logs in one place (raftlogplace.go).

// storeEntryLog is the store as the Raft member's EntryLog.
type storeEntryLog struct{ s *storage.Store }

func (l storeEntryLog) StoreEntries(es []cluster.LogEntry) error {
	out := make([]storage.Entry, len(es))
	for i, e := range es {
		out[i] = storage.Entry{Index: e.Index, Meta: e.Meta, Records: e.Records, DeletesTopic: deletedTopic(e)}
	}
	return l.s.StoreEntries(out)
}

// deletedTopic is the topic entry e deletes, if it is a DeleteTopic: the
// store numbers that topic's queues from 0 after it as it stores it, so
// that the records stored after it are numbered alike on every replica,
// whenever each applies the deletion (storage/topicdelete.go). Only
// commands without records are read; one that does not decode deletes
// nothing here (the state machine stops on it).
func deletedTopic(e cluster.LogEntry) string {
	if len(e.Records) > 0 || len(e.Command) == 0 || e.Command[0] == sendRecordsEntry || e.Command[0] == sequencedEntry {
		return ""
	}
	cmd, err := decodeCommand(e.Command)
	if err != nil {
		return ""
	}
	return cmd.GetDeleteTopic()
}

func (l storeEntryLog) ReadEntry(index uint64) (cluster.LogEntry, error) {
	e, err := l.s.ReadEntry(index)
	if errors.Is(err, storage.ErrEntryNotFound) {
		return cluster.LogEntry{}, fmt.Errorf("%w: %w", cluster.ErrNoEntry, err)
	}
	return cluster.LogEntry{Index: e.Index, Meta: e.Meta, Records: e.Records}, err
}

func (l storeEntryLog) EntryIndexes() (first, last uint64, ok bool) { return l.s.EntryIndexes() }
func (l storeEntryLog) CutStored(after uint64) error                { return l.s.CutStored(after) }
func (l storeEntryLog) ForgetEntries(index uint64)                  { l.s.ForgetEntries(index) }

// IndexAtStart: without a snapshot, every entry from the oldest segment
// retention kept (each begins with an entry); with one, the newest
// segment's, and the restore indexes from the snapshot's offset
// (fsm.indexFrom): a start reads what follows the snapshot, not the
// whole commitlog.
func (l storeEntryLog) IndexAtStart(snapshot bool) error {
	if snapshot {
		return l.s.IndexNewestEntries()
	}
	clMin, _ := l.s.CommitlogOffsets()
	return l.s.IndexEntries(clMin)
}

var _ cluster.EntryLog = storeEntryLog{}
