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
// what the state machine dispatched. Experimental (raftmq broker
// --raft-log commitlog): DeleteTopic is refused, since sends stored after
// its entry and before it applies were numbered on the queues it deletes;
// a WAL member does not move its log into the commitlog.

// storeEntryLog is the store as the Raft member's EntryLog.
type storeEntryLog struct{ s *storage.Store }

func (l storeEntryLog) StoreEntries(es []cluster.LogEntry) error {
	out := make([]storage.Entry, len(es))
	for i, e := range es {
		out[i] = storage.Entry(e)
	}
	return l.s.StoreEntries(out)
}

func (l storeEntryLog) ReadEntry(index uint64) (cluster.LogEntry, error) {
	e, err := l.s.ReadEntry(index)
	if errors.Is(err, storage.ErrEntryNotFound) {
		return cluster.LogEntry{}, fmt.Errorf("%w: %w", cluster.ErrNoEntry, err)
	}
	return cluster.LogEntry(e), err
}

func (l storeEntryLog) EntryIndexes() (first, last uint64, ok bool) { return l.s.EntryIndexes() }
func (l storeEntryLog) CutStored(after uint64) error                { return l.s.CutStored(after) }
func (l storeEntryLog) ForgetEntries(index uint64)                  { l.s.ForgetEntries(index) }

var _ cluster.EntryLog = storeEntryLog{}
