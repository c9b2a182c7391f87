package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

// The batcher without a Raft group: a fake Raft member takes its entries
// and answers each when the test lets it, so the tests see exactly which
// sends share an entry and how many entries are in flight.

// fakeRaft records every entry applied and holds its answer until let.
type fakeRaft struct {
	mu      sync.Mutex
	entries []fakeEntry
	applied chan int // the number of each entry applied, in order
}

type fakeEntry struct {
	bodies []string
	future *fakeFuture
}

type fakeFuture struct {
	let  chan error // the answer: nil, or Raft's error
	once sync.Once
	err  error
	n    int
}

// Error waits for the test's answer; one never given (a test that failed
// before it) is an error after 10 s, so that the batcher's loop, which
// waits for its entries' waiters, stops rather than hangs the test.
func (f *fakeFuture) Error() error {
	f.once.Do(func() {
		select {
		case f.err = <-f.let:
		case <-time.After(10 * time.Second):
			f.err = errors.New("the test never answered this entry")
		}
	})
	return f.err
}
func (f *fakeFuture) Index() uint64 { return 0 }

// Response is the state machine's: a result per record, in order.
func (f *fakeFuture) Response() any {
	res := &applyResult{results: make([]storage.AppendResult, f.n)}
	for i := range res.results {
		res.results[i].QueueOffset = int64(i)
	}
	return res
}

func newFakeRaft() *fakeRaft { return &fakeRaft{applied: make(chan int, 64)} }

func (r *fakeRaft) apply(data []byte, _ time.Duration) raft.ApplyFuture {
	var bodies []string
	for b := data[1:]; len(b) > 0; {
		size, _, err := message.Frame(b, false)
		if err != nil {
			panic(err)
		}
		// The batcher stamps the store time and leaves the CRC for the
		// store to write (message.SetStoreTime): mend it on a copy.
		c := append([]byte(nil), b[:size]...)
		binary.BigEndian.PutUint32(c[8:], crc32.Checksum(c[12:], crc32.MakeTable(crc32.Castagnoli)))
		rec, err := message.Decode(c)
		if err != nil {
			panic(err)
		}
		bodies = append(bodies, string(rec.Body))
		b = b[size:]
	}
	f := &fakeFuture{let: make(chan error, 1), n: len(bodies)}
	r.mu.Lock()
	r.entries = append(r.entries, fakeEntry{bodies: bodies, future: f})
	n := len(r.entries)
	r.mu.Unlock()
	r.applied <- n
	return f
}

// next waits for the next entry applied and returns it.
func (r *fakeRaft) next(t *testing.T) fakeEntry {
	t.Helper()
	select {
	case n := <-r.applied:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.entries[n-1]
	case <-time.After(5 * time.Second):
		t.Fatal("no entry applied within 5 s")
		return fakeEntry{}
	}
}

func (r *fakeRaft) none(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case n := <-r.applied:
		t.Fatalf("entry %d applied, want none yet", n)
	case <-time.After(within):
	}
}

func newTestBatcher(t *testing.T, r *fakeRaft, tweak func(*Config)) *batcher {
	cfg := Config{EntryMaxMessages: 1024, EntryMaxBytes: 4 << 20, MaxInflightEntries: 8, MaxPendingSends: 64, SendTimeout: time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	m := &metrics{
		applySeconds:  prometheus.NewHistogram(prometheus.HistogramOpts{Name: "s"}),
		applyMessages: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "m"}),
		companyWaits:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "w"}, []string{"ended"}),
	}
	p := proposer{apply: r.apply, calls: &raftCalls{}, replicationError: func(err error) error { return fmt.Errorf("replication: %w", err) }}
	return newBatcher(cfg, p, m)
}

func fakeRecords(t *testing.T, bodies ...string) []byte {
	t.Helper()
	return clustertest.Records(t, "t", bodies...)
}

type sent struct {
	res []storage.AppendResult
	err error
}

// send submits bodies in the background; its outcome arrives on the
// channel returned.
func send(t *testing.T, bt *batcher, bodies ...string) <-chan sent {
	out := make(chan sent, 1)
	recs := fakeRecords(t, bodies...)
	go func() {
		res, err := bt.submit(context.Background(), recs, len(bodies), sendSeq{})
		out <- sent{res, err}
	}()
	return out
}

func outcome(t *testing.T, c <-chan sent) sent {
	t.Helper()
	select {
	case s := <-c:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no answer within 5 s")
		return sent{}
	}
}

func startRun(t *testing.T, bt *batcher) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { bt.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return cancel
}

// A lone send proposes its own entry on its own goroutine: with the
// batcher's loop not even running, it is applied and answered.
func TestBatcherLoneSendGoesAlone(t *testing.T) {
	r := newFakeRaft()
	bt := newTestBatcher(t, r, nil)
	c := send(t, bt, "a1", "a2")
	e := r.next(t)
	if fmt.Sprint(e.bodies) != "[a1 a2]" {
		t.Fatalf("the lone send's entry holds %v", e.bodies)
	}
	e.future.let <- nil
	if s := outcome(t, c); s.err != nil || len(s.res) != 2 {
		t.Fatalf("the lone send: %d results, %v", len(s.res), s.err)
	}
	if bt.inflight.Load() != 0 {
		t.Fatalf("%d entries in flight after the answer", bt.inflight.Load())
	}
}

// While an entry is in flight, the sends that arrive wait and share the
// next entry; each gets its own records' results.
func TestBatcherMergesSendsWhileAnEntryIsInFlight(t *testing.T) {
	r := newFakeRaft()
	bt := newTestBatcher(t, r, nil)
	startRun(t, bt)
	first := send(t, bt, "a")
	e1 := r.next(t)
	waiting := []<-chan sent{send(t, bt, "b1", "b2"), send(t, bt, "c"), send(t, bt, "d1", "d2", "d3")}
	waitFor(t, 5*time.Second, func() bool { return bt.queued.Load() == 3 })
	r.none(t, 20*time.Millisecond) // one entry in flight: they wait
	e1.future.let <- nil
	if s := outcome(t, first); s.err != nil || len(s.res) != 1 {
		t.Fatalf("the first send: %d results, %v", len(s.res), s.err)
	}
	e2 := r.next(t)
	if len(e2.bodies) != 6 {
		t.Fatalf("the next entry holds %v, want the three waiting sends' 6 messages", e2.bodies)
	}
	e2.future.let <- nil
	for i, want := range []int{2, 1, 3} {
		if s := outcome(t, waiting[i]); s.err != nil || len(s.res) != want {
			t.Fatalf("waiting send %d: %d results, %v; want %d", i, len(s.res), s.err, want)
		}
	}
}

// Full entries go out beside the one in flight, up to MaxInflightEntries;
// no more are in flight at once.
func TestBatcherFullEntriesUpToTheInflightCap(t *testing.T) {
	r := newFakeRaft()
	bt := newTestBatcher(t, r, func(c *Config) { c.EntryMaxMessages = 2; c.MaxInflightEntries = 3 })
	startRun(t, bt)
	first := send(t, bt, "a")
	e1 := r.next(t)
	var rest []<-chan sent
	for i := range 8 {
		rest = append(rest, send(t, bt, fmt.Sprint("m", i)))
	}
	e2, e3 := r.next(t), r.next(t)
	if len(e2.bodies) != 2 || len(e3.bodies) != 2 {
		t.Fatalf("full entries beside the first hold %v and %v, want 2 messages each", e2.bodies, e3.bodies)
	}
	r.none(t, 20*time.Millisecond) // three in flight: the cap
	if n := bt.inflight.Load(); n != 3 {
		t.Fatalf("%d entries in flight, want 3", n)
	}
	e1.future.let <- nil
	outcome(t, first)
	e4 := r.next(t)
	for _, e := range []fakeEntry{e2, e3, e4} {
		e.future.let <- nil
	}
	e5 := r.next(t)
	e5.future.let <- nil
	for _, c := range rest {
		if s := outcome(t, c); s.err != nil || len(s.res) != 1 {
			t.Fatalf("a queued send: %d results, %v", len(s.res), s.err)
		}
	}
}

// Raft's failure of an entry reaches each of its senders, mapped; sends
// still queued when the batcher stops are told it is shutting down.
func TestBatcherFailuresReachEverySender(t *testing.T) {
	r := newFakeRaft()
	bt := newTestBatcher(t, r, nil)
	stop := startRun(t, bt)
	first := send(t, bt, "a")
	e1 := r.next(t)
	queued := send(t, bt, "b")
	waitFor(t, 5*time.Second, func() bool { return bt.queued.Load() == 1 })
	stop()
	if s := outcome(t, queued); !errors.Is(s.err, errShuttingDown) {
		t.Fatalf("a send queued at the stop: %v, want errShuttingDown", s.err)
	}
	e1.future.let <- raft.ErrLeadershipLost
	if s := outcome(t, first); !errors.Is(s.err, raft.ErrLeadershipLost) || s.err.Error() != "replication: "+raft.ErrLeadershipLost.Error() {
		t.Fatalf("the failed entry's sender: %v, want Raft's error mapped", s.err)
	}
}

// finishBehind sends "a", which goes out alone, queues bodies behind its
// entry, then lets that entry finish; it returns the queued sends.
func finishBehind(t *testing.T, bt *batcher, r *fakeRaft, bodies ...string) []<-chan sent {
	t.Helper()
	first := send(t, bt, "a")
	e1 := r.next(t)
	var queued []<-chan sent
	for _, b := range bodies {
		queued = append(queued, send(t, bt, b))
	}
	waitFor(t, 5*time.Second, func() bool { return bt.queued.Load() == int32(len(bodies)) })
	e1.future.let <- nil
	outcome(t, first)
	return queued
}

// Once an entry of several senders finishes, the next waits for as many
// sends as that entry had and those queued with it (its senders come back
// with their next), rather than going out with the ones already queued.
func TestBatcherWaitsForTheLastEntrysSenders(t *testing.T) {
	r := newFakeRaft()
	bt := newTestBatcher(t, r, func(c *Config) { c.GroupCommitWait = time.Minute })
	startRun(t, bt)
	queued := finishBehind(t, bt, r, "b", "c", "d")
	// Company: the finished entry's one sender and the three queued with it.
	r.none(t, 50*time.Millisecond)
	again := send(t, bt, "a'")
	e2 := r.next(t)
	if got := slices.Sorted(slices.Values(e2.bodies)); fmt.Sprint(got) != "[a' b c d]" {
		t.Fatalf("the entry after the wait holds %v, want the four sends (in any order)", e2.bodies)
	}
	e2.future.let <- nil
	for _, s := range append(queued, again) {
		if o := outcome(t, s); o.err != nil || len(o.res) != 1 {
			t.Fatalf("a send of the merged entry: %d results, %v", len(o.res), o.err)
		}
	}
	// The wait, of about the 50 ms the test took to send again, ended with
	// the company come.
	if n, sum := waitsEnded(t, bt, "company"); n != 1 || sum < 0.04 {
		t.Errorf("waits ended by company: %d, %.3f s in all; want 1 of at least 0.04 s", n, sum)
	}
	if n, _ := waitsEnded(t, bt, "timeout"); n != 0 {
		t.Errorf("waits run out: %d, want 0", n)
	}
}

// waitsEnded is how many waits for company the batcher observed ending
// as ended says (raftmq_group_commit_wait_seconds), and their seconds.
func waitsEnded(t *testing.T, bt *batcher, ended string) (uint64, float64) {
	t.Helper()
	var o prometheus.Observer
	switch ended {
	case "company":
		o = bt.waitedForCompany
	case "timeout":
		o = bt.waitedInVain
	default:
		t.Fatalf("no wait ends as %q", ended)
	}
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// Company that does not come back is waited for GroupCommitWait after the
// entry finished, no longer: the sends queued then go out without it.
func TestBatcherWaitsForCompanyNoLongerThanGroupCommitWait(t *testing.T) {
	r := newFakeRaft()
	bt := newTestBatcher(t, r, func(c *Config) { c.GroupCommitWait = 100 * time.Millisecond })
	startRun(t, bt)
	queued := finishBehind(t, bt, r, "b", "c", "d")
	r.none(t, 20*time.Millisecond) // well within the wait
	e2 := r.next(t)
	if got := slices.Sorted(slices.Values(e2.bodies)); fmt.Sprint(got) != "[b c d]" {
		t.Fatalf("the entry after the wait holds %v, want [b c d]", e2.bodies)
	}
	e2.future.let <- nil
	for _, s := range queued {
		outcome(t, s)
	}
	if n, sum := waitsEnded(t, bt, "timeout"); n != 1 || sum < 0.05 || sum > 0.5 {
		t.Errorf("waits run out: %d, %.3f s in all; want 1 of about GroupCommitWait, 0.1 s from the entry's end (0.05-0.5 s)", n, sum)
	}
	if n, _ := waitsEnded(t, bt, "company"); n != 0 {
		t.Errorf("waits ended by company: %d, want 0", n)
	}
}

// Company of fewer than companyWorthWaiting is not waited for: once an
// entry of one send finishes, the send queued behind it goes out at once,
// though GroupCommitWait is long (producers at a steady rate paid it on
// every send).
func TestBatcherWaitsForNoSmallCompany(t *testing.T) {
	r := newFakeRaft()
	bt := newTestBatcher(t, r, func(c *Config) { c.GroupCommitWait = time.Minute })
	startRun(t, bt)
	queued := finishBehind(t, bt, r, "b")
	e2 := r.next(t) // r.next fails after 5 s: the minute's wait would
	if fmt.Sprint(e2.bodies) != "[b]" {
		t.Fatalf("the entry after the first holds %v, want [b]", e2.bodies)
	}
	e2.future.let <- nil
	outcome(t, queued[0])
	// And a send after it, to an empty queue, proposes at once.
	if !bt.alone() {
		t.Fatal("after entries of one send, a lone send still expects company")
	}
}

// A lone send waits for no company: after an entry of one sender, and
// after an entry of several once the wait for them is over, it proposes
// its own entry at once (on its own goroutine: the loop is not running).
// While the wait lasts it queues.
func TestBatcherLoneSendWaitsForNoCompany(t *testing.T) {
	r := newFakeRaft()
	bt := newTestBatcher(t, r, func(c *Config) { c.GroupCommitWait = time.Minute })
	for _, tc := range []struct {
		company int32
		ago     time.Duration
		alone   bool
	}{
		{company: 1, alone: true},
		{company: 0, alone: true},
		{company: 5, ago: 2 * time.Minute, alone: true},
		{company: 5, alone: false},
	} {
		bt.company.Store(tc.company)
		bt.freedAt.Store(time.Now().Add(-tc.ago).UnixNano())
		c := send(t, bt, "x")
		if !tc.alone {
			waitFor(t, 5*time.Second, func() bool { return bt.queued.Load() == 1 })
			r.none(t, 20*time.Millisecond)
			bt.failQueued(nil)
			if s := outcome(t, c); !errors.Is(s.err, errShuttingDown) {
				t.Fatalf("company %d: the queued send: %v", tc.company, s.err)
			}
			continue
		}
		e := r.next(t)
		e.future.let <- nil
		if s := outcome(t, c); s.err != nil {
			t.Fatalf("company %d, the wait over %v ago: %v", tc.company, tc.ago, s.err)
		}
	}
}

// sendAll submits each of batches (a send's bodies) together, as the sends
// of one streamed request, in the background; each one's outcome arrives
// on its channel.
func sendAll(t *testing.T, bt *batcher, batches ...[]string) []<-chan sent {
	reqs := make([]*sendReq, len(batches))
	outs := make([]<-chan sent, len(batches))
	for i, bodies := range batches {
		reqs[i] = &sendReq{records: fakeRecords(t, bodies...), n: len(bodies), done: make(chan sendOutcome, 1)}
		out := make(chan sent, 1)
		outs[i] = out
		go func() {
			res, err := reqs[i].await(context.Background(), nil)
			out <- sent{res, err}
		}()
	}
	go bt.submitAll(reqs)
	return outs
}

// Sends that come together go in one entry: alone on an idle group (the
// batcher's loop not even running), and when they had to wait for an
// entry in flight. Each gets its own records' results.
func TestBatcherSendsThatComeTogetherShareAnEntry(t *testing.T) {
	r := newFakeRaft()
	bt := newTestBatcher(t, r, nil)
	together := sendAll(t, bt, []string{"a1", "a2"}, []string{"b"}, []string{"c1", "c2", "c3"})
	e := r.next(t)
	if fmt.Sprint(e.bodies) != "[a1 a2 b c1 c2 c3]" {
		t.Fatalf("the entry of sends that came together to an idle group holds %v", e.bodies)
	}
	e.future.let <- nil
	for i, want := range []int{2, 1, 3} {
		if s := outcome(t, together[i]); s.err != nil || len(s.res) != want {
			t.Fatalf("send %d: %d results, %v; want %d", i, len(s.res), s.err, want)
		}
	}

	startRun(t, bt)
	first := send(t, bt, "x")
	e1 := r.next(t)
	waiting := sendAll(t, bt, []string{"d"}, []string{"e1", "e2"})
	waitFor(t, 5*time.Second, func() bool { return bt.queued.Load() == 2 })
	r.none(t, 20*time.Millisecond) // one entry in flight: they wait
	e1.future.let <- nil
	outcome(t, first)
	e2 := r.next(t)
	if fmt.Sprint(e2.bodies) != "[d e1 e2]" {
		t.Fatalf("the entry after the one in flight holds %v, want the waiting sends' [d e1 e2]", e2.bodies)
	}
	e2.future.let <- nil
	for i, want := range []int{1, 2} {
		if s := outcome(t, waiting[i]); s.err != nil || len(s.res) != want {
			t.Fatalf("waiting send %d: %d results, %v; want %d", i, len(s.res), s.err, want)
		}
	}
	bt.submitAll(nil)
	r.none(t, 20*time.Millisecond) // no entry without records: it would fail every store
}

// Sends waited for together each get their own outcome: a result that
// came, or TIMEOUT at the send's own deadline for one that did not come,
// also for a send whose deadline passed while the one before it was
// waited for.
func TestAwaitAllGivesEachSendItsDeadline(t *testing.T) {
	reqs := make([]*sendReq, 4)
	for i := range reqs {
		reqs[i] = &sendReq{done: make(chan sendOutcome, 1)}
	}
	reqs[0].done <- sendOutcome{results: make([]storage.AppendResult, 2)}
	reqs[2].done <- sendOutcome{err: errors.New("refused")}
	start := time.Now()
	deadlines := []time.Time{start, start.Add(50 * time.Millisecond), start.Add(time.Hour), start.Add(10 * time.Millisecond)}
	outs := awaitAll(context.Background(), reqs, deadlines)
	if took := time.Since(start); took < 50*time.Millisecond || took > 5*time.Second {
		t.Fatalf("took %v, want the 50 ms of the send that never came", took)
	}
	if len(outs[0].results) != 2 || outs[0].err != nil {
		t.Fatalf("send 0, answered before its deadline: %v", outs[0])
	}
	for _, j := range []int{1, 3} {
		if reason, _ := pb.ReasonOf(outs[j].err); reason != pb.ErrorReason_TIMEOUT {
			t.Fatalf("send %d, never answered: %v, want TIMEOUT", j, outs[j].err)
		}
	}
	if outs[2].err == nil || outs[2].err.Error() != "refused" {
		t.Fatalf("send 2: %v, want its own error", outs[2].err)
	}
}
