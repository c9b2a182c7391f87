package storage

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/raftmq/raftmq/message"
)

// A topic's deletion is a frame in the commitlog (message.SysFlagDeletesTopic),
// where its Raft entry is in the log. The topic's queues are removed where
// the frame is dispatched, and recovery, a rebuild of the queues and a
// copy from a peer all dispatch it in its place: the queues they build
// hold the topic's records after its last deletion only, numbered from 0
// as the live store numbered them. (Before, the deletion was in no file:
// a crash before the next checkpoint redispatched the deleted records
// into the recreated queue, and a rebuild found two records at one queue
// offset and cut the commitlog before the later one, an acknowledged
// send.)
//
// With Config.RaftLog the frame is the deleting entry's own, written when
// the entry is stored (Entry.DeletesTopic), long before it may be applied:
// records of the topic stored after it are numbered from 0 at once
// (deleting), so a replica numbers them alike however far its applying
// lags its storing. Otherwise DeleteTopic writes the frame alone when the
// deletion is applied.

// DeleteTopic deletes topic as Raft entry raftIndex applies it: a frame
// that says so is appended (as any batch, synced in FlushSync mode), and
// the topic's consume queues are removed. Its records stay in the
// commitlog until retention deletes their segments; the topic's queues
// begin again at 0. A failure to remove the queues' files fails the store
// (see Err). With Config.RaftLog the entry's frame deletes it instead
// (Entry.DeletesTopic).
func (s *Store) DeleteTopic(raftIndex uint64, topic string) error {
	if !message.ValidTopic(topic) {
		return fmt.Errorf("%w: topic %q", ErrInvalidMessage, topic)
	}
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if s.cfg.RaftLog {
		return fmt.Errorf("%w: with the commitlog as the Raft log, the entry that deletes a topic is stored naming it (Entry.DeletesTopic)", ErrInvalidMessage)
	}
	if err := s.appendableAtOnce(raftIndex); err != nil {
		return err
	}
	if _, err := s.storeFrame(Entry{Index: raftIndex, DeletesTopic: topic}); err != nil {
		return err
	}
	s.dispatchedEmpty()
	if err := s.Err(); err != nil { // the queues' removal failed
		return err
	}
	return s.syncWrites()
}

// deleteQueues removes topic's consume queues and their files, counting
// their entries out of st. A failure fails the store. The caller holds
// appendMu.
func (s *Store) deleteQueues(topic string, st *checkpoint) error {
	s.queuesMu.Lock()
	for k, q := range s.queues {
		if k.topic == topic {
			st.queueEntries -= q.max.Load()
			q.close()
			delete(s.queues, k)
		}
	}
	s.queuesMu.Unlock()
	dir := filepath.Join(s.cfg.Dir, consumeQueueDir, topic)
	var err error
	if s.cfg.DiskFault != nil {
		if ferr := s.cfg.DiskFault("remove", dir); ferr != nil {
			err = &os.PathError{Op: "remove", Path: dir, Err: ferr}
		}
	}
	if err == nil {
		err = os.RemoveAll(dir)
	}
	if err != nil {
		// A disk that cannot remove files is failing: the store stops
		// taking writes, as after a failed write.
		err = fmt.Errorf("storage: delete topic %s: %w", topic, err)
		s.fail(err)
		return err
	}
	return nil
}

// numberAfresh makes the records of topic stored from now on number its
// queues from 0: a stored entry that deletes it (not dispatched yet) was
// just stored or found. The caller holds appendMu.
func (s *Store) numberAfresh(topic string) {
	for k := range s.storeNext {
		if k.topic == topic {
			delete(s.storeNext, k)
		}
	}
	s.deleting[topic]++
}

// deleted counts a stored entry that deletes topic dispatched. The caller
// holds appendMu.
func (s *Store) deleted(topic string) {
	if s.deleting[topic]--; s.deleting[topic] <= 0 {
		delete(s.deleting, topic)
	}
}

// frameDeletes returns the topic a frame marked SysFlagDeletesTopic
// deletes.
func frameDeletes(rec []byte) (string, error) {
	r, err := decodeRecord(rec)
	if err != nil {
		return "", err
	}
	topic := r.Properties[message.PropertyDeletesTopic]
	if !message.ValidTopic(topic) {
		return "", fmt.Errorf("%w: the frame at commitlog offset %d deletes topic %q", ErrCorrupt, r.Offset, topic)
	}
	return topic, nil
}

// dispatchFound dispatches a record found in the commitlog that is no
// stored entry's (recovery's, a rebuild's, a copy's): a record as
// dispatchStored does, and a frame that deletes a topic by deleting its
// queues. (A stored entry's deletion is dispatchedOldest's.)
func (s *Store) dispatchFound(rec []byte, st *checkpoint) error {
	if message.HeaderSysFlag(rec)&message.SysFlagDeletesTopic != 0 {
		topic, err := frameDeletes(rec)
		if err != nil {
			return err
		}
		return s.deleteQueues(topic, st)
	}
	return s.dispatchStored(rec, st)
}
