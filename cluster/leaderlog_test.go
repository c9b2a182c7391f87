package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// gateStore is a log store whose writes wait while its gate is shut (a
// slow disk) and fail once told to; over the WAL in the Raft tests, in
// memory in the others.
type gateStore struct {
	raft.LogStore
	mu     sync.Mutex
	gate   chan struct{} // closed: open
	fail   error
	writes [][]uint64 // the indexes of each write begun, in order
}

func newGateStore(inner raft.LogStore) *gateStore {
	g := &gateStore{LogStore: inner, gate: make(chan struct{})}
	close(g.gate)
	return g
}

func (g *gateStore) shut() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gateStore) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.gate: // open already
	default:
		close(g.gate)
	}
}

func (g *gateStore) failWith(err error) {
	g.mu.Lock()
	g.fail = err
	g.mu.Unlock()
}

func (g *gateStore) StoreLogs(logs []*raft.Log) error {
	var idx []uint64
	for _, l := range logs {
		idx = append(idx, l.Index)
	}
	g.mu.Lock()
	gate := g.gate
	g.writes = append(g.writes, idx) // begun: it may wait at the gate
	g.mu.Unlock()
	<-gate
	g.mu.Lock()
	err := g.fail
	g.mu.Unlock()
	if err != nil {
		return err
	}
	return g.LogStore.StoreLogs(logs)
}

func (g *gateStore) written() [][]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.writes)
}

// gatedGroup is a group of three whose members' logs are gateStores, with
// SpareFollowerInterval every (0: off); gate(i) is member i's.
func gatedGroup(t *testing.T, every time.Duration) (*testGroup, func(member int) *gateStore) {
	t.Helper()
	var mu sync.Mutex
	gates := map[string]*gateStore{}
	g := newTestGroup(t, 3, 100*time.Millisecond, func(c *RaftConfig) {
		c.SpareFollowerInterval = every
		id := c.ID
		c.wrapLog = func(inner raft.LogStore) raft.LogStore {
			gs := newGateStore(inner)
			mu.Lock()
			gates[id] = gs
			mu.Unlock()
			return gs
		}
	})
	return g, func(member int) *gateStore {
		mu.Lock()
		defer mu.Unlock()
		return gates[strconv.Itoa(member+1)]
	}
}

// memLog is a log store in memory.
type memLog struct {
	mu   sync.Mutex
	logs map[uint64]*raft.Log
}

func (m *memLog) FirstIndex() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var first uint64
	for i := range m.logs {
		if first == 0 || i < first {
			first = i
		}
	}
	return first, nil
}

func (m *memLog) LastIndex() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var last uint64
	for i := range m.logs {
		last = max(last, i)
	}
	return last, nil
}

func (m *memLog) GetLog(index uint64, log *raft.Log) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.logs[index]
	if !ok {
		return raft.ErrLogNotFound
	}
	*log = *l
	return nil
}

func (m *memLog) StoreLog(log *raft.Log) error { return m.StoreLogs([]*raft.Log{log}) }

func (m *memLog) StoreLogs(logs []*raft.Log) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range logs {
		m.logs[l.Index] = l
	}
	return nil
}

func (m *memLog) DeleteRange(min, max uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := min; i <= max; i++ {
		delete(m.logs, i)
	}
	return nil
}

// newTestLeaderLog is a leaderLog over a gated store in memory, leading
// while leading is true.
func newTestLeaderLog(t *testing.T, leading *atomic.Bool) (*leaderLog, *gateStore) {
	t.Helper()
	g := newGateStore(&memLog{logs: map[uint64]*raft.Log{}})
	l, err := newLeaderLog(g, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	l.lead(leading.Load)
	t.Cleanup(func() {
		g.open() // a test that shut the gate may have failed with it shut
		l.Close()
	})
	return l, g
}

func logs(from, to uint64) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, &raft.Log{Index: i, Term: 1, Data: []byte(fmt.Sprint("entry-", i))})
	}
	return out
}

// within runs f and fails the test unless it returns within d: a call that
// must not wait for the disk.
func within(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("%s: still waiting after %v", what, d)
	}
}

// waiting starts f and returns a channel that gets its result; the test
// checks it is still waiting, then lets the disk go on.
func waiting(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

// stillWaiting fails the test if done has a result after a moment (a
// bounded look for something that must not happen yet).
func stillWaiting(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while the disk was held", what, err)
	case <-time.After(50 * time.Millisecond):
	}
}

func result(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no result within 5 s", what)
		return nil
	}
}

// While leading, StoreLogs returns before the disk has the entries, which
// are readable at once; entries queued behind a write go to the disk
// together; durability is reported only once the disk has them.
func TestLeaderLogQueuesWhileLeading(t *testing.T) {
	var leading atomic.Bool
	leading.Store(true)
	l, g := newTestLeaderLog(t, &leading)
	g.shut()
	within(t, time.Second, "StoreLogs 1-3 with the disk held", func() error { return l.StoreLogs(logs(1, 3)) })
	var got raft.Log
	if err := l.GetLog(2, &got); err != nil || string(got.Data) != "entry-2" {
		t.Fatalf("GetLog(2) of a queued entry: %q, %v", got.Data, err)
	}
	if last, _ := l.LastIndex(); last != 3 {
		t.Fatalf("LastIndex %d, want 3", last)
	}
	if first, _ := l.FirstIndex(); first != 1 {
		t.Fatalf("FirstIndex %d, want 1", first)
	}
	clustertest.WaitFor(t, 5*time.Second, "the write of 1-3 begun", func() bool { return len(g.written()) == 1 })
	durable := waiting(func() error { return l.waitDurable(5) })
	within(t, time.Second, "StoreLogs 4-5 behind the held write", func() error { return l.StoreLogs(logs(4, 5)) })
	stillWaiting(t, durable, "waitDurable(5)")
	if d := l.Durable(); d != 0 {
		t.Fatalf("Durable %d with the disk held, want 0", d)
	}
	g.open()
	if err := result(t, durable, "waitDurable(5)"); err != nil {
		t.Fatal(err)
	}
	if d := l.Durable(); d != 5 {
		t.Fatalf("Durable %d, want 5", d)
	}
	// The first write took 1-3; 4 and 5, queued during it, went in one.
	if w := g.written(); !slices.EqualFunc(w, [][]uint64{{1, 2, 3}, {4, 5}}, slices.Equal) {
		t.Fatalf("writes %v, want [[1 2 3] [4 5]]", w)
	}
	if err := g.LogStore.GetLog(5, &got); err != nil || string(got.Data) != "entry-5" {
		t.Fatalf("the disk's entry 5: %q, %v", got.Data, err)
	}
}

// A follower's StoreLogs returns only once the disk has its entries (its
// acknowledgement says so), after what it queued while it led.
func TestLeaderLogWritesAtOnceAsFollower(t *testing.T) {
	var leading atomic.Bool
	leading.Store(true)
	l, g := newTestLeaderLog(t, &leading)
	g.shut()
	within(t, time.Second, "StoreLogs 1-2 as leader", func() error { return l.StoreLogs(logs(1, 2)) })
	clustertest.WaitFor(t, 5*time.Second, "the write of 1-2 begun", func() bool { return len(g.written()) == 1 })
	leading.Store(false)
	stored := waiting(func() error { return l.StoreLogs(logs(3, 3)) })
	stillWaiting(t, stored, "a follower's StoreLogs")
	g.open()
	if err := result(t, stored, "a follower's StoreLogs"); err != nil {
		t.Fatal(err)
	}
	if d := l.Durable(); d != 3 {
		t.Fatalf("Durable %d after the follower's write, want 3", d)
	}
	if w := g.written(); !slices.EqualFunc(w, [][]uint64{{1, 2}, {3}}, slices.Equal) {
		t.Fatalf("writes %v, want [[1 2] [3]]", w)
	}
}

// DeleteRange writes what is queued first; a deleted suffix is no longer
// durable.
func TestLeaderLogDeleteRangeWritesQueuedFirst(t *testing.T) {
	var leading atomic.Bool
	leading.Store(true)
	l, g := newTestLeaderLog(t, &leading)
	g.shut()
	within(t, time.Second, "StoreLogs 1-3", func() error { return l.StoreLogs(logs(1, 3)) })
	deleted := waiting(func() error { return l.DeleteRange(3, 3) })
	stillWaiting(t, deleted, "DeleteRange")
	g.open()
	if err := result(t, deleted, "DeleteRange"); err != nil {
		t.Fatal(err)
	}
	if last, _ := l.LastIndex(); last != 2 {
		t.Fatalf("LastIndex %d after deleting 3, want 2", last)
	}
	if d := l.Durable(); d != 2 {
		t.Fatalf("Durable %d after deleting 3, want 2", d)
	}
}

// Deleting a prefix (Raft's compaction after a snapshot) does not wait
// for the queue: under a steady load it is never empty for long.
func TestLeaderLogDeletesAPrefixBesideTheQueue(t *testing.T) {
	var leading atomic.Bool
	leading.Store(true)
	l, g := newTestLeaderLog(t, &leading)
	within(t, time.Second, "StoreLogs 1-4", func() error { return l.StoreLogs(logs(1, 4)) })
	if err := l.waitDurable(4); err != nil {
		t.Fatal(err)
	}
	g.shut()
	within(t, time.Second, "StoreLogs 5-6 with the disk held", func() error { return l.StoreLogs(logs(5, 6)) })
	within(t, time.Second, "DeleteRange 1-3 beside the held write", func() error { return l.DeleteRange(1, 3) })
	if first, _ := l.FirstIndex(); first != 4 {
		t.Fatalf("FirstIndex %d after deleting 1-3, want 4", first)
	}
	if d := l.Durable(); d != 4 {
		t.Fatalf("Durable %d after deleting a prefix, want 4", d)
	}
}

// A failed background write fails the log: it says so once, every later
// write fails, entries it was told are stored stay readable, and nothing
// waiting for durability waits for ever.
func TestLeaderLogWriteFailureStopsIt(t *testing.T) {
	var leading atomic.Bool
	leading.Store(true)
	l, g := newTestLeaderLog(t, &leading)
	g.failWith(errors.New("input/output error"))
	g.shut()
	within(t, time.Second, "StoreLogs 1-2", func() error { return l.StoreLogs(logs(1, 2)) })
	durable := waiting(func() error { return l.waitDurable(2) }) // Raft applies only what it stored
	g.open()
	select {
	case <-l.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("Failed not closed after the write failed")
	}
	if err := result(t, durable, "waitDurable(2)"); err == nil {
		t.Fatal("waitDurable(2) succeeded after the write failed")
	}
	if err := l.Err(); err == nil || !errorsContain(err, "entries 1-2", "input/output error") {
		t.Fatalf("Err = %v, want the entries and the disk's error", err)
	}
	if err := l.StoreLogs(logs(3, 3)); err == nil {
		t.Fatal("a write after the failure succeeded")
	}
	leading.Store(false)
	if err := l.StoreLogs(logs(3, 3)); err == nil {
		t.Fatal("a follower's write after the failure succeeded")
	}
	var got raft.Log
	if err := l.GetLog(1, &got); err != nil {
		t.Fatalf("GetLog(1) after the failure: %v", err)
	}
}

// Close writes what is queued before it closes the disk.
func TestLeaderLogCloseWritesWhatIsQueued(t *testing.T) {
	var leading atomic.Bool
	leading.Store(true)
	l, g := newTestLeaderLog(t, &leading)
	g.shut()
	within(t, time.Second, "StoreLogs 1-4", func() error { return l.StoreLogs(logs(1, 4)) })
	closed := waiting(l.Close)
	stillWaiting(t, closed, "Close")
	g.open()
	if err := result(t, closed, "Close"); err != nil {
		t.Fatal(err)
	}
	if last, _ := g.LogStore.LastIndex(); last != 4 {
		t.Fatalf("the disk holds up to %d after Close, want 4", last)
	}
}

func errorsContain(err error, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			return false
		}
	}
	return true
}

// Through a real group of 3: while the leader's disk holds its write, an
// entry commits in Raft's terms on a follower's copy (the leader's write
// no longer comes first), yet no replica applies it and its Apply does not
// return; once the leader's disk has it, all three apply it. Without the
// cap on the commit index sent (durableCommits) the followers apply it
// early; without durableFSM the leader does.
func TestLeaderCommitsBesideItsOwnWrite(t *testing.T) {
	g, gates := gatedGroup(t, 0)
	leader := g.leader()
	before := g.apply(leader, "before", 3)
	g.converge(before)

	gate := gates(leader)
	gate.shut()
	defer gate.open()
	prev := lastLogIndex(g.nodes[leader])
	future := g.nodes[leader].Raft.Apply([]byte("held"), 10*time.Second)
	// Raft records the entry as its last (and hands it to replication)
	// once StoreLogs returns: with the leader's write first, never while
	// the disk is held.
	clustertest.WaitFor(t, 5*time.Second, "the entry committed on a follower's copy", func() bool {
		commit, _ := strconv.ParseUint(g.nodes[leader].Raft.Stats()["commit_index"], 10, 64)
		return lastLogIndex(g.nodes[leader]) > prev && commit > prev
	})
	applied := waiting(future.Error)
	stillWaiting(t, applied, "Apply")
	for i, f := range g.fsms {
		if slices.Contains(f.list(), "held") {
			t.Fatalf("member %d applied the entry before the leader's disk had it", i+1)
		}
	}
	gate.open()
	if err := result(t, applied, "Apply"); err != nil {
		t.Fatal(err)
	}
	g.converge(append(before, "held"))
}

// A failed write of the leader's log stops its state machine: the entry's
// Apply gets what the state machine's LogFailed says, and LogFailed
// reports it to whoever must stop the member.
func TestLeaderLogWriteFailureReachesTheStateMachine(t *testing.T) {
	var gate *gateStore
	addr := clustertest.FreeAddrs(t, 1)[0]
	cfg := testRaftConfig("1", t.TempDir(), map[string]string{"1": addr}, 50*time.Millisecond)
	cfg.wrapLog = func(inner raft.LogStore) raft.LogStore { gate = newGateStore(inner); return gate }
	fsm := &failingFSM{}
	n, err := StartRaft(cfg, fsm)
	if err != nil {
		t.Fatal(err)
	}
	stop := drainLeaderChanges(n)
	defer func() { n.Close(); stop() }()
	clustertest.WaitFor(t, 5*time.Second, "leader", func() bool { return n.Raft.State() == raft.Leader })
	if err := n.Raft.Apply([]byte("fine"), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	gate.failWith(errors.New("no space left on device"))
	f := n.Raft.Apply([]byte("lost"), 5*time.Second)
	select {
	case <-n.LogFailed():
	case <-time.After(5 * time.Second):
		t.Fatal("LogFailed not closed after the leader's write failed")
	}
	if err := n.LogErr(); err == nil || !errorsContain(err, "no space left on device") {
		t.Fatalf("LogErr = %v", err)
	}
	if f.Error() == nil {
		if resp, _ := f.Response().(string); resp != "log failed" {
			t.Fatalf("Apply's response %v, want the state machine's LogFailed answer", f.Response())
		}
	}
	if got := fsm.list(); !slices.Equal(got, []string{"fine"}) {
		t.Fatalf("the state machine applied %q", got)
	}
}

// failingFSM records what it applies and answers LogFailed.
type failingFSM struct{ logFSM }

func (*failingFSM) LogFailed(error) any { return "log failed" }
