package broker

import (
	"sync"

	"github.com/raftmq/raftmq/cluster/pb"
)

// halfTable is the replicated state of transactional half messages: which
// halves have ended (committed or rolled back) and how often each open
// one was checked back. Halves are known by their queue offset in the half
// topic's one queue, so "every half below the cursor has ended" says most
// of it: the table lists only halves from the cursor on that ended out of
// order or were checked, and the last keepEnded ended ones below it, so
// that an end asked again (a producer's retry after an unknown outcome)
// is answered with the first one's outcome.
//
// Every replica changes it in Raft order (apply), from what the entries
// carry, never its own clock, so all hold the same table; it is in the
// snapshot. RocketMQ keeps this as offsets into an "op" topic, which
// re-checks ended halves and can end one twice (the rocketmq5-messages
// note, B.3-B.4: #1517, #5574, #8158): here an end applies only to an open
// half.
type halfTable struct {
	mu     sync.RWMutex
	cursor int64
	halves map[int64]*pb.HalfState
}

// keepEnded is how many ended halves below the cursor keep their outcome.
const keepEnded = 4096

func newHalfTable() *halfTable { return &halfTable{halves: map[int64]*pb.HalfState{}} }

// halfStatus is a copy of a half's state.
type halfStatus struct {
	Outcome    pb.TransactionOutcome
	CheckTimes int32
	CheckedAt  int64 // unix ms
}

// state is a half's state: its outcome, its checks; ok false when it
// ended so long ago that its outcome is no longer kept.
func (t *halfTable) state(off int64) (st halfStatus, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if h := t.halves[off]; h != nil {
		return halfStatus{h.Outcome, h.CheckTimes, h.CheckedAt}, true
	}
	return halfStatus{}, off >= t.cursor
}

// position is the cursor: every half below it has ended.
func (t *halfTable) position() int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.cursor
}

// open is how many halves are open of the end halves stored.
func (t *halfTable) open(end int64) int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := end - t.cursor
	for off, h := range t.halves {
		if off >= t.cursor && h.Outcome != pb.TransactionOutcome_TRANSACTION_UNKNOWN {
			n--
		}
	}
	return max(n, 0)
}

// apply applies an update, in Raft order, and says which of its ends
// applied: an end (or a check count) applies only to a half still open.
func (t *halfTable) apply(u *pb.TransactionUpdate) []bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	applied := make([]bool, len(u.Ends))
	for i, e := range u.Ends {
		if e == nil || e.HalfOffset < t.cursor {
			continue
		}
		h := t.halves[e.HalfOffset]
		if h == nil {
			h = &pb.HalfState{}
			t.halves[e.HalfOffset] = h
		}
		if h.Outcome != pb.TransactionOutcome_TRANSACTION_UNKNOWN {
			continue
		}
		applied[i] = true
		if e.Outcome == pb.TransactionOutcome_TRANSACTION_UNKNOWN {
			h.CheckTimes, h.CheckedAt = e.CheckTimes, u.StoreTimestamp
			continue
		}
		h.Outcome = e.Outcome
	}
	was := t.cursor
	if u.ExpireBelow > t.cursor {
		t.cursor = u.ExpireBelow
	}
	for {
		h := t.halves[t.cursor]
		if h == nil || h.Outcome == pb.TransactionOutcome_TRANSACTION_UNKNOWN {
			break
		}
		t.cursor++
	}
	t.forget(was-keepEnded, t.cursor-keepEnded)
	return applied
}

// forget drops the halves in [from, to): nothing below from is left.
func (t *halfTable) forget(from, to int64) {
	if to-from > int64(len(t.halves)) {
		for off := range t.halves {
			if off < to {
				delete(t.halves, off)
			}
		}
		return
	}
	for off := from; off < to; off++ {
		delete(t.halves, off)
	}
}

// snapshot copies the table into a snapshot's form.
func (t *halfTable) snapshot() *pb.TransactionState {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s := &pb.TransactionState{Cursor: t.cursor, Halves: make(map[int64]*pb.HalfState, len(t.halves))}
	for off, h := range t.halves {
		s.Halves[off] = &pb.HalfState{Outcome: h.Outcome, CheckTimes: h.CheckTimes, CheckedAt: h.CheckedAt}
	}
	return s
}

// restore replaces the table with a snapshot's (nil: an empty table, as in
// snapshots taken before transactions existed).
func (t *halfTable) restore(s *pb.TransactionState) {
	fresh := newHalfTable()
	if s != nil {
		fresh.cursor = s.Cursor
		for off, h := range s.Halves {
			if h != nil {
				fresh.halves[off] = h
			}
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cursor, t.halves = fresh.cursor, fresh.halves
}
