package broker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

// The hold service alone: a fake store's queue ends, no Raft group, no
// gRPC. The pull service's part (reading again, the answers) is
// longpoll_test.go's.

// prompt bounds how long a wait may take to return once it should: far
// above what it takes (microseconds), so a loaded machine does not fail
// the tests, and far below the minute the pulls here are held for.
const prompt = time.Second

// fakeQueues stands for the store's queue ends. onRead, when set before
// the holds are used, runs at each read before it answers, so a test can
// put an arrival at that exact moment. With slow, a read yields the
// processor once it has read, as a store's read may take a while: that
// widens the window in which a wrong ordering loses a wake-up.
type fakeQueues struct {
	mu     sync.Mutex
	ends   map[queueKey]int64
	onRead func(queueKey)
	slow   bool
}

func (f *fakeQueues) QueueOffsets(topic string, queue int32) (int64, int64) {
	k := queueKey{topic, queue}
	if f.onRead != nil {
		f.onRead(k)
	}
	f.mu.Lock()
	end := f.ends[k]
	f.mu.Unlock()
	if f.slow {
		runtime.Gosched()
	}
	return 0, end
}

func (f *fakeQueues) set(k queueKey, end int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ends[k] = end
}

// newTestHolds is a hold service over a fake store, on a master, with
// caps of 100 unless cfg sets them. Every goroutine a test starts must be
// gone when it ends (its waits end with t.Context()).
func newTestHolds(t *testing.T, cfg Config) (*holdService, *fakeQueues) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	if cfg.MaxHeldPulls == 0 {
		cfg.MaxHeldPulls = 100
	}
	if cfg.MaxHeldPullsPerClient == 0 {
		cfg.MaxHeldPullsPerClient = 100
	}
	q := &fakeQueues{ends: map[queueKey]int64{}}
	return newHoldService(cfg, q, func() bool { return true }), q
}

// startWait runs wait on its own goroutine, as a pull's handler does.
func startWait(ctx context.Context, h *holdService, p *heldPull, timeout time.Duration) <-chan woke {
	out := make(chan woke, 1)
	go func() { out <- h.wait(ctx, p, timeout) }()
	return out
}

func wokeWithin(t *testing.T, w <-chan woke, d time.Duration) woke {
	t.Helper()
	select {
	case why := <-w:
		return why
	case <-time.After(d):
		t.Fatalf("wait did not return within %v", d)
		return 0
	}
}

func wantWoke(t *testing.T, what string, w <-chan woke, want woke) {
	t.Helper()
	if got := wokeWithin(t, w, prompt); got != want {
		t.Fatalf("%s: woke for %v, want %v", what, got, want)
	}
}

// wakeReason is why p was woken, 0 while it is not. Wakes happen under
// the lock, so after arrived, check or a wake call returns this is exact.
func wakeReason(h *holdService, p *heldPull) woke {
	h.mu.Lock()
	defer h.mu.Unlock()
	return p.why
}

func waitHeld(t *testing.T, h *holdService, n int) {
	t.Helper()
	waitFor(t, prompt, func() bool { return h.size() == n })
}

var holdQueue = queueKey{"t", 0}

// A message that lands between a pull's failed read and its registration
// is not missed, whichever side of the wait's own read of the queue's end
// it lands on.
func TestHoldNoLostWakeUp(t *testing.T) {
	t.Run("appended before the re-check", func(t *testing.T) {
		h, q := newTestHolds(t, Config{})
		// The append and its arrival come before the pull registers:
		// the arrival wakes nothing, the re-check sees the new end.
		q.set(holdQueue, 1)
		h.arrived(holdQueue, 1, nil)
		start := time.Now()
		if why := h.wait(t.Context(), &heldPull{key: holdQueue}, prompt); why != wokeGrown {
			t.Fatalf("woke for %v after %v, want %v at once", why, time.Since(start), wokeGrown)
		}
		if n := h.size(); n != 0 {
			t.Fatalf("%d pulls held after the wait", n)
		}
	})
	t.Run("appended after the re-check", func(t *testing.T) {
		h, q := newTestHolds(t, Config{})
		// The re-check reads the old end; the append and its arrival
		// come right after, before the pull waits on its channel.
		q.onRead = func(k queueKey) { h.arrived(k, 1, nil) }
		start := time.Now()
		if why := h.wait(t.Context(), &heldPull{key: holdQueue}, prompt); why != wokeArrival {
			t.Fatalf("woke for %v after %v, want %v at once", why, time.Since(start), wokeArrival)
		}
	})
}

// Many pulls register while a message lands, round after round, with no
// periodic check to rescue a pull an arrival missed: every one wakes on
// that message. (Run with -race.)
func TestHoldNoLostWakeUpUnderRace(t *testing.T) {
	h, q := newTestHolds(t, Config{})
	q.slow = true
	const waiters, rounds = 16, 500
	for round := range int64(rounds) {
		woken := make([]woke, waiters)
		var wg sync.WaitGroup
		for i := range waiters {
			wg.Go(func() {
				// Each pull read the queue empty at round, then waits.
				p := &heldPull{client: fmt.Sprint(i), key: holdQueue, offset: round}
				woken[i] = h.wait(t.Context(), p, prompt)
			})
		}
		for range rand.IntN(200) {
			runtime.Gosched()
		}
		q.set(holdQueue, round+1)
		h.arrived(holdQueue, round+1, nil)
		wg.Wait()
		for i, why := range woken {
			if why != wokeArrival && why != wokeGrown {
				t.Fatalf("round %d: pull %d woke for %v: the arrival was lost", round, i, why)
			}
		}
		if n := h.size(); n != 0 {
			t.Fatalf("round %d: %d pulls still held", round, n)
		}
	}
}

// Past the cap on held pulls, or on its client's, a pull is answered at
// once and not held; under them, held.
func TestHoldCapsAnswerTheExcessAtOnce(t *testing.T) {
	h, _ := newTestHolds(t, Config{MaxHeldPulls: 3, MaxHeldPullsPerClient: 2})
	ctx := t.Context()
	pull := func(client string) *heldPull { return &heldPull{client: client, key: holdQueue} }
	startWait(ctx, h, pull("hog"), time.Minute)
	startWait(ctx, h, pull("hog"), time.Minute)
	waitHeld(t, h, 2)
	wantWoke(t, "the hog's third pull", startWait(ctx, h, pull("hog"), time.Minute), wokeOverCap)
	if n := h.size(); n != 2 {
		t.Fatalf("%d pulls held after one over the client's cap of 2", n)
	}
	startWait(ctx, h, pull("other"), time.Minute)
	waitHeld(t, h, 3)
	wantWoke(t, "a pull over the cap of 3", startWait(ctx, h, pull("third"), time.Minute), wokeOverCap)
	if n := h.size(); n != 3 {
		t.Fatalf("%d pulls held after one over the cap of 3", n)
	}
}

// The periodic pass wakes a pull whose queue grew with no arrival told,
// and one whose deadline passed; it leaves the others.
func TestHoldCheckWakesGrownAndExpiredPulls(t *testing.T) {
	h, q := newTestHolds(t, Config{})
	now := time.Now()
	grown := &heldPull{key: holdQueue, deadline: now.Add(time.Minute)}
	expired := &heldPull{key: queueKey{"t", 1}, deadline: now.Add(-time.Millisecond)}
	waiting := &heldPull{key: queueKey{"t", 1}, deadline: now.Add(time.Minute)}
	for _, p := range []*heldPull{grown, expired, waiting} {
		if !h.register(p) {
			t.Fatal("not held")
		}
	}
	q.set(holdQueue, 1)
	h.check(now)
	for _, c := range []struct {
		name string
		p    *heldPull
		want woke
	}{{"grown", grown, wokeGrown}, {"expired", expired, wokeTimeout}, {"waiting", waiting, 0}} {
		if got := wakeReason(h, c.p); got != c.want {
			t.Errorf("%s pull: woken for %v, want %v", c.name, got, c.want)
		}
	}
}

// The check loop runs the pass: a held pull whose queue grew with no
// arrival told is answered within a few intervals. A pull's own timeout
// answers it too.
func TestHoldCheckLoopAndTimeout(t *testing.T) {
	h, q := newTestHolds(t, Config{HoldCheckInterval: 10 * time.Millisecond})
	rechecked := make(chan struct{}, 1)
	q.onRead = func(queueKey) {
		select {
		case rechecked <- struct{}{}:
		default:
		}
	}
	w := startWait(t.Context(), h, &heldPull{key: holdQueue}, time.Minute)
	<-rechecked // the wait saw the queue empty; only the loop can see it grow
	q.set(holdQueue, 1)
	go h.run(t.Context())
	wantWoke(t, "a pull whose queue grew", w, wokeGrown)

	start := time.Now()
	why := h.wait(t.Context(), &heldPull{key: queueKey{"t", 1}}, 30*time.Millisecond)
	if waited := time.Since(start); why != wokeTimeout || waited < 30*time.Millisecond || waited > prompt {
		t.Fatalf("a pull held 30ms woke for %v after %v", why, waited)
	}
	if n := h.size(); n != 0 {
		t.Fatalf("%d pulls held after both", n)
	}
}

// An arrival wakes the pulls of its queue below its new end whose filter
// it matches, and no other.
func TestHoldArrivalWakesMatchingPulls(t *testing.T) {
	h, _ := newTestHolds(t, Config{})
	a, c := message.TagHash("A"), message.TagHash("C")
	anyTag := &heldPull{key: holdQueue}
	tagged := &heldPull{key: holdQueue, tagHashes: []int64{message.TagHash("B"), c}}
	ahead := &heldPull{key: holdQueue, offset: 5}
	elsewhere := &heldPull{key: queueKey{"t", 1}}
	for _, p := range []*heldPull{anyTag, tagged, ahead, elsewhere} {
		if !h.register(p) {
			t.Fatal("not held")
		}
	}
	h.arrived(holdQueue, 1, []int64{a})
	if wakeReason(h, anyTag) != wokeArrival || wakeReason(h, tagged) != 0 || wakeReason(h, ahead) != 0 || wakeReason(h, elsewhere) != 0 {
		t.Fatalf("an A at 0 woke: any %v, B||C %v, at 5 %v, other queue %v",
			wakeReason(h, anyTag), wakeReason(h, tagged), wakeReason(h, ahead), wakeReason(h, elsewhere))
	}
	h.arrived(holdQueue, 2, []int64{a, c})
	if wakeReason(h, tagged) != wokeArrival || wakeReason(h, ahead) != 0 {
		t.Fatalf("an A and a C up to 2 woke: B||C %v, at 5 %v", wakeReason(h, tagged), wakeReason(h, ahead))
	}
}

// The state machine's hook wakes pulls on the master only, with each
// queue's new end and every tag that arrived on it.
func TestHoldAppendedWakesOnTheMasterOnly(t *testing.T) {
	h, _ := newTestHolds(t, Config{})
	master := false
	h.isMaster = func() bool { return master }
	p := &heldPull{key: holdQueue, offset: 1, tagHashes: []int64{message.TagHash("C")}}
	if !h.register(p) {
		t.Fatal("not held")
	}
	batch := []storage.AppendResult{
		{Topic: "t", QueueID: 0, QueueOffset: 0, TagHash: message.TagHash("C")},
		{Topic: "t", QueueID: 1, QueueOffset: 0, TagHash: message.TagHash("A")},
		{Topic: "t", QueueID: 0, QueueOffset: 1, TagHash: message.TagHash("A")},
	}
	h.appended(batch)
	if why := wakeReason(h, p); why != 0 {
		t.Fatalf("a slave's append woke a pull for %v", why)
	}
	master = true
	h.appended(batch[:1])
	if why := wakeReason(h, p); why != 0 {
		t.Fatalf("a C at 0 woke a pull waiting beyond 1 for %v", why)
	}
	h.appended(batch)
	if why := wakeReason(h, p); why != wokeArrival {
		t.Fatalf("a C up to 2 woke the pull for %v, want %v", why, wokeArrival)
	}
}

// A pull whose client goes away returns at once and is no longer held,
// nor counted against its client.
func TestHoldCancelledPullIsReleased(t *testing.T) {
	h, _ := newTestHolds(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	w := startWait(ctx, h, &heldPull{client: "c", key: holdQueue}, time.Minute)
	waitHeld(t, h, 1)
	cancel()
	wantWoke(t, "a cancelled pull", w, wokeCancelled)
	if n, c := h.size(), len(h.perClient); n != 0 || c != 0 {
		t.Fatalf("after the cancel %d pulls held, %d clients counted", n, c)
	}
}

// A change in a group answers its held pulls and no other's; losing
// leadership (or the store, or closing) answers them all.
func TestHoldWakeGroupAndWakeAll(t *testing.T) {
	h, _ := newTestHolds(t, Config{})
	ctx := t.Context()
	g1 := startWait(ctx, h, &heldPull{group: "g", key: holdQueue}, time.Minute)
	g2 := startWait(ctx, h, &heldPull{group: "g", key: queueKey{"u", 3}}, time.Minute)
	other := &heldPull{group: "h", key: holdQueue}
	o := startWait(ctx, h, other, time.Minute)
	waitHeld(t, h, 3)
	h.wakeGroup("g")
	wantWoke(t, "group g's first pull", g1, wokeGroup)
	wantWoke(t, "group g's second pull", g2, wokeGroup)
	if why, n := wakeReason(h, other), h.size(); why != 0 || n != 1 {
		t.Fatalf("after g's change: group h's pull woken for %v, %d pulls held", why, n)
	}
	h.wakeAll()
	wantWoke(t, "group h's pull on leadership loss", o, wokeNotMaster)
	if n := h.size(); n != 0 {
		t.Fatalf("%d pulls held after wakeAll", n)
	}
}
