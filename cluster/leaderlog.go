package cluster

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// The leader's Raft log is written beside replication, not before it.
//
// hashicorp/raft's leader appends a batch to its own log, fsync included,
// and only then hands it to its replicators (raft.go, dispatchLogs), so a
// commit costs the leader's fsync and then a follower's round trip and
// fsync: 0.22 ms and 0.37 ms of a 0.58 ms commit, in process
// (broker/README.md, "Where one synchronous send's time goes"). The Raft
// thesis (§10.2.1) and etcd/raft write the leader's log in parallel with
// replication, and count the leader toward a quorum only once its own
// write is durable. hashicorp/raft has no such switch; three pieces give
// the same guarantee around it:
//
//   - leaderLog, the log store: while this member leads, StoreLogs queues
//     the batch and returns at once, so Raft hands it to the replicators
//     now; one writer goroutine appends what is queued to the WAL (fsync
//     included), many batches a write when they queue up behind one.
//     Queued entries are readable at once (replication reads them). As a
//     follower StoreLogs writes and syncs before it returns, as before: a
//     follower's acknowledgement means its disk holds the entry.
//   - durableCommits, the transport: the commit index the leader sends its
//     followers is capped at what its own log holds durably, so no
//     follower applies an entry the leader could still lose at a power cut.
//   - durableFSM, the state machine: the leader applies an entry (and so
//     acknowledges it to a producer) only once its own log holds it.
//
// Raft counts the leader's own copy as soon as StoreLogs returns, so an
// entry commits in Raft's terms once enough followers hold it. No replica
// applies it before the leader's disk holds it too: a majority of the
// group's disks, every one of which Raft counted, holds every entry any
// state machine applies. What the leader had queued but not written when
// it lost power was applied nowhere and acknowledged to nobody; Raft
// treats it as any uncommitted suffix. A member that stops leading writes
// what it queued before it stores or deletes anything as a follower.
//
// A failed write stops the member as a failed store does (a write error
// stops the node rather than letting it serve): Raft was told the entries
// were stored, so the state machine applies nothing from then on
// (LogFailer) and the broker leaves its group (RaftNode.LogFailed).

// LogFailer is a state machine that is told, instead of applying an entry,
// that the member's Raft log could not hold it; what it returns is the
// entry's response. A state machine without it gets the error.
type LogFailer interface {
	LogFailed(err error) any
}

// errLogClosed: the log was closed while an entry waited for it.
var errLogClosed = errors.New("cluster: raft log closed")

// leaderLog is the log store Raft uses (see above), over the WAL.
type leaderLog struct {
	inner      raft.LogStore
	closeInner func() error // the WAL's Close
	// leading reports whether Raft is this member's leader now; nil until
	// Raft runs, and every write is synchronous until then.
	leading atomic.Pointer[func() bool]

	mu      sync.Mutex
	changed *sync.Cond  // a batch was queued, written or failed, or the log closed
	pending []*raft.Log // queued or being written, in index order
	durable atomic.Uint64
	err     error // the writer's failure: every later write fails with it
	closed  bool
	failed  chan struct{} // closed when the writer fails
	done    chan struct{} // closed when the writer has exited
}

func newLeaderLog(inner raft.LogStore, closeInner func() error) (*leaderLog, error) {
	last, err := inner.LastIndex()
	if err != nil {
		return nil, err
	}
	l := &leaderLog{inner: inner, closeInner: closeInner, failed: make(chan struct{}), done: make(chan struct{})}
	l.changed = sync.NewCond(&l.mu)
	l.durable.Store(last)
	go l.write()
	return l, nil
}

// lead tells the log how to know whether this member leads.
func (l *leaderLog) lead(leading func() bool) { l.leading.Store(&leading) }

func (l *leaderLog) isLeading() bool {
	f := l.leading.Load()
	return f != nil && (*f)()
}

// StoreLogs queues logs while this member leads (the writer makes them
// durable), and writes them now otherwise.
func (l *leaderLog) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	if !l.isLeading() {
		return l.storeNow(logs)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.err != nil:
		return l.err
	case l.closed:
		return errLogClosed
	case len(l.pending) > 0 && logs[0].Index != l.pending[len(l.pending)-1].Index+1:
		return fmt.Errorf("cluster: raft log: entry %d queued after %d", logs[0].Index, l.pending[len(l.pending)-1].Index)
	}
	l.pending = append(l.pending, logs...)
	l.changed.Broadcast()
	return nil
}

func (l *leaderLog) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

// storeNow writes what is queued, then logs, and returns once they are
// durable.
func (l *leaderLog) storeNow(logs []*raft.Log) error {
	if err := l.drain(); err != nil {
		return err
	}
	if err := l.inner.StoreLogs(logs); err != nil {
		return err
	}
	l.mu.Lock()
	l.durable.Store(logs[len(logs)-1].Index)
	l.changed.Broadcast()
	l.mu.Unlock()
	return nil
}

// drain waits until nothing is queued.
func (l *leaderLog) drain() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.pending) > 0 && l.err == nil {
		l.changed.Wait()
	}
	return l.err
}

// write appends what is queued to the inner log, everything queued at
// once, until the log closes (having written it all) or a write fails.
func (l *leaderLog) write() {
	defer close(l.done)
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		for len(l.pending) == 0 && !l.closed {
			l.changed.Wait()
		}
		if len(l.pending) == 0 {
			return // closed, and all written
		}
		batch := l.pending[:len(l.pending):len(l.pending)]
		l.mu.Unlock()
		// No yield before the write, though on one thread of Go code the
		// sync then holds back a replicator readied with this writer: with
		// the replicas on one disk, the follower it leaves a round behind
		// keeps a third sync out of the commit's window, and a yield here
		// measured slower (broker/README.md, 2026-12-05 eighth sitting).
		err := l.inner.StoreLogs(batch)
		l.mu.Lock()
		if err != nil {
			// The entries stay readable; nothing more is written.
			l.err = fmt.Errorf("cluster: raft log: write of entries %d-%d failed: %w", batch[0].Index, batch[len(batch)-1].Index, err)
			close(l.failed)
			l.changed.Broadcast()
			return
		}
		l.durable.Store(batch[len(batch)-1].Index)
		l.pending = l.pending[len(batch):]
		l.changed.Broadcast()
	}
}

// Durable is the last index the log holds durably.
func (l *leaderLog) Durable() uint64 { return l.durable.Load() }

// waitDurable returns once the log holds entry index durably, or with the
// writer's failure. An index neither durable nor queued is in the inner
// log already (durable is only lowered by a deletion, which Raft follows
// with writes of its own).
func (l *leaderLog) waitDurable(index uint64) error {
	if l.durable.Load() >= index {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.durable.Load() < index && len(l.pending) > 0 && l.err == nil {
		l.changed.Wait()
	}
	if l.durable.Load() < index && l.err != nil {
		return l.err
	}
	return nil
}

// Failed is closed when a write of queued entries failed; Err says how.
func (l *leaderLog) Failed() <-chan struct{} { return l.failed }

func (l *leaderLog) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *leaderLog) GetLog(index uint64, log *raft.Log) error {
	l.mu.Lock()
	if n := len(l.pending); n > 0 && index >= l.pending[0].Index && index <= l.pending[n-1].Index {
		*log = *l.pending[index-l.pending[0].Index]
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	// Written entries leave the queue only once the inner log has them.
	return l.inner.GetLog(index, log)
}

func (l *leaderLog) FirstIndex() (uint64, error) {
	first, err := l.inner.FirstIndex()
	if err != nil || first != 0 {
		return first, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) > 0 {
		return l.pending[0].Index, nil
	}
	return 0, nil
}

func (l *leaderLog) LastIndex() (uint64, error) {
	l.mu.Lock()
	if n := len(l.pending); n > 0 {
		last := l.pending[n-1].Index
		l.mu.Unlock()
		return last, nil
	}
	l.mu.Unlock()
	return l.inner.LastIndex()
}

// DeleteRange deletes from the inner log, having first written what is
// queued when the range reaches it. Raft deletes a prefix after a snapshot
// (from its snapshot goroutine, while the leader goes on queueing: waiting
// for an empty queue could wait as long as the load lasts), or, as a
// follower, a suffix that conflicts with its leader's.
func (l *leaderLog) DeleteRange(min, max uint64) error {
	l.mu.Lock()
	queued := len(l.pending) > 0 && max >= l.pending[0].Index
	l.mu.Unlock()
	if queued {
		if err := l.drain(); err != nil {
			return err
		}
	}
	if err := l.inner.DeleteRange(min, max); err != nil {
		return err
	}
	l.mu.Lock()
	if max >= l.durable.Load() && min > 0 {
		l.durable.Store(min - 1) // the durable tail went with the suffix
	}
	l.mu.Unlock()
	return nil
}

// IsMonotonic passes the WAL's answer on (raft.MonotonicLogStore: Raft
// then clears the whole log after restoring a snapshot).
func (l *leaderLog) IsMonotonic() bool {
	m, ok := l.inner.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// Close writes what is queued, stops the writer and closes the inner log.
func (l *leaderLog) Close() error {
	l.mu.Lock()
	l.closed = true
	l.changed.Broadcast()
	l.mu.Unlock()
	<-l.done
	return l.closeInner()
}

var (
	_ raft.LogStore          = (*leaderLog)(nil)
	_ raft.MonotonicLogStore = (*leaderLog)(nil)
)

// durableCommits is the member's transport with the commit index it sends
// capped at what its log holds durably (see leaderLog).
type durableCommits struct {
	*heartbeatGate
	log    *leaderLog
	spares *spareFollowers // nil: every follower gets each entry at once
}

func (t durableCommits) capped(args *raft.AppendEntriesRequest) *raft.AppendEntriesRequest {
	durable := t.log.Durable()
	if args.LeaderCommitIndex <= durable {
		return args
	}
	c := *args
	c.LeaderCommitIndex = durable
	return &c
}

func (t durableCommits) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.spares == nil || len(args.Entries) == 0 {
		return t.memberTransport.AppendEntries(id, target, t.capped(args), resp)
	}
	last, largest := args.Entries[len(args.Entries)-1].Index, 0
	for _, e := range args.Entries {
		largest = max(largest, len(e.Data))
	}
	t.spares.hold(id, args.Term, last, largest, func() uint64 { // sparefollowers.go
		l, err := t.log.LastIndex()
		if err != nil {
			return last + 1 // the follower goes at once
		}
		return l
	})
	err := t.memberTransport.AppendEntries(id, target, t.capped(args), resp)
	t.spares.answered(id, args.Term, last, err == nil && resp.Success)
	return err
}

func (t durableCommits) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newSteadyPipeline(durablePipeline{AppendPipeline: p, t: t}), nil
}

type durablePipeline struct {
	raft.AppendPipeline
	t durableCommits
}

func (p durablePipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	return p.AppendPipeline.AppendEntries(p.t.capped(args), resp)
}

var (
	_ raft.Transport   = durableCommits{}
	_ raft.WithPreVote = durableCommits{}
	_ raft.WithClose   = durableCommits{}
)

// durableFSM applies an entry only once the member's log holds it durably
// (see leaderLog).
type durableFSM struct {
	raft.FSM
	log *leaderLog
}

func (f durableFSM) Apply(l *raft.Log) any {
	if err := f.log.waitDurable(l.Index); err != nil {
		if lf, ok := f.FSM.(LogFailer); ok {
			return lf.LogFailed(err)
		}
		return err
	}
	return f.FSM.Apply(l)
}
