package broker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/raftmq/raftmq/storage"
)

// holdService keeps the pulls that found nothing, per topic@queue, until a
// message arrives for them, their suspend timeout passes, their client goes
// away, their consumer group's members change (the answer tells the
// member to rebalance) or its offsets are reset, or this replica stops
// being master (RocketMQ's PullRequestHoldService).
//
// The rest of the broker calls only wait (the pull service), appended
// (the state machine's hook), wakeGroup and wakeAll (the events that
// answer held pulls early), size (HeldPulls, raftmq_held_pulls) and run
// (the periodic check's loop); the rest is the mechanism behind them, so
// it can be tested without a Raft group (holdservice_test.go).
//
// No lost wake-up: wait registers the pull before it re-checks the queue's
// end, and an arrival wakes every pull registered below the new end, so a
// message that lands between the pull's failed read and its registration
// is seen by one or the other.
type holdService struct {
	queues     queueEnds
	isMaster   func() bool // only the master's arrivals wake: slaves hold none
	checkEvery time.Duration

	mu        sync.Mutex
	held      map[queueKey][]*heldPull
	count     int
	max       int
	perClient map[string]int // held pulls by heldPull.client
	maxClient int
}

// queueEnds is what the hold service reads of the store: a queue's end,
// the offset its next message takes (*storage.Store; a fake in tests).
type queueEnds interface {
	QueueOffsets(topic string, queue int32) (min, max int64)
}

// queueKey names a topic's queue: the held pulls are kept by it, and
// nothing else in the package is (offsetKey and lockKey name a group's
// queue).
type queueKey struct {
	topic string
	queue int32
}

// heldPull is a pull waiting in the hold service. The pull service fills
// in who it is and what it waits for; wait (or register) the rest.
type heldPull struct {
	client    string // who holds it (clientKey), for the per-client cap
	group     string // the consumer group pulling
	key       queueKey
	offset    int64   // the offset the pull waits beyond
	tagHashes []int64 // nil: any message wakes it

	deadline time.Time
	wake     chan struct{} // closed once, by wakeLocked
	why      woke          // set under holdService.mu before wake is closed
}

// woke is why wait returned. The pull service tells apart only
// wokeCancelled and wokeOverCap; the other reasons are for the tests and
// for reading the code.
type woke int

const (
	wokeOverCap   woke = iota + 1 // never held: the cap, or its client's, was reached
	wokeGrown                     // the queue's end was past the offset at registration or at a periodic check
	wokeArrival                   // a matching message arrived
	wokeTimeout                   // its timeout passed
	wokeGroup                     // its group's members changed or its offsets were reset
	wokeNotMaster                 // this replica stopped being master: leadership lost, store failed, closing
	wokeCancelled                 // its context ended (the client went away)
)

var wokeNames = [...]string{"not woken", "over the cap", "queue grown", "arrival", "timeout", "group changed", "not master", "cancelled"}

func (w woke) String() string {
	if w < 0 || int(w) >= len(wokeNames) {
		return "woke(?)"
	}
	return wokeNames[w]
}

// newHoldService takes its caps and check interval from cfg; queues and
// isMaster are the store and the master flag.
func newHoldService(cfg Config, queues queueEnds, isMaster func() bool) *holdService {
	return &holdService{
		queues: queues, isMaster: isMaster, checkEvery: cfg.HoldCheckInterval,
		held: map[queueKey][]*heldPull{}, max: cfg.MaxHeldPulls,
		perClient: map[string]int{}, maxClient: cfg.MaxHeldPullsPerClient,
	}
}

// wait holds p until its queue grows past p.offset with a message it
// wants, timeout passes, ctx ends or one of wakeGroup and wakeAll answers
// it, and says which. Over a cap it returns wokeOverCap at once. p is no
// longer held when wait returns.
func (h *holdService) wait(ctx context.Context, p *heldPull, timeout time.Duration) woke {
	p.deadline = time.Now().Add(timeout)
	if !h.register(p) {
		return wokeOverCap
	}
	defer h.release(p)
	// After register: a message appended before this read shows here, one
	// appended after it calls arrived, which finds p registered.
	if h.queueEnd(p.key) > p.offset {
		return wokeGrown
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.wake:
		return p.why
	case <-timer.C:
		return wokeTimeout
	case <-ctx.Done():
		return wokeCancelled
	}
}

func (h *holdService) queueEnd(k queueKey) int64 {
	_, max := h.queues.QueueOffsets(k.topic, k.queue)
	return max
}

// register adds p; false when the cap on held pulls, or on its client's,
// is reached.
func (h *holdService) register(p *heldPull) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.count >= h.max || h.perClient[p.client] >= h.maxClient {
		return false
	}
	p.wake = make(chan struct{})
	h.held[p.key] = append(h.held[p.key], p)
	h.count++
	h.perClient[p.client]++
	return true
}

// release removes a pull that is done waiting. Safe to call after it was
// woken.
func (h *holdService) release(p *heldPull) {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.held[p.key]
	i := slices.Index(list, p)
	if i < 0 {
		return
	}
	list = slices.Delete(list, i, i+1)
	h.count--
	if h.perClient[p.client]--; h.perClient[p.client] <= 0 {
		delete(h.perClient, p.client)
	}
	if len(list) == 0 {
		delete(h.held, p.key)
	} else {
		h.held[p.key] = list
	}
}

// wakeLocked wakes p once, for the first reason given. Caller holds mu.
func (h *holdService) wakeLocked(p *heldPull, why woke) {
	if p.why == 0 {
		p.why = why
		close(p.wake)
	}
}

// wakeEach wakes, for why, every held pull that match accepts.
func (h *holdService) wakeEach(why woke, match func(*heldPull) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, list := range h.held {
		for _, p := range list {
			if match(p) {
				h.wakeLocked(p, why)
			}
		}
	}
}

// appended is the state machine's hook, called after a send batch is
// stored: on the master it wakes the pulls held on the batch's queues,
// once a queue, with the tags of everything that arrived on it.
func (h *holdService) appended(res []storage.AppendResult) {
	if !h.isMaster() {
		return
	}
	type arrival struct {
		max  int64
		tags []int64
	}
	arrivals := map[queueKey]*arrival{}
	for _, r := range res {
		if r.Dropped {
			continue // nothing a pull can read
		}
		k := queueKey{r.Topic, r.QueueID}
		a := arrivals[k]
		if a == nil {
			a = &arrival{}
			arrivals[k] = a
		}
		a.max = r.QueueOffset + 1
		a.tags = append(a.tags, r.TagHash)
	}
	for k, a := range arrivals {
		h.arrived(k, a.max, a.tags)
	}
}

// arrived wakes the pulls of a queue that wait below its new end and whose
// filter matches one of the arrived tags (tagHashes of the new messages).
func (h *holdService) arrived(k queueKey, newMax int64, tagHashes []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.held[k] {
		if p.offset < newMax && (p.tagHashes == nil || anyIn(tagHashes, p.tagHashes)) {
			h.wakeLocked(p, wokeArrival)
		}
	}
}

// run checks the held pulls every HoldCheckInterval until ctx ends.
func (h *holdService) run(ctx context.Context) {
	every(ctx, h.checkEvery, h.check)
}

// check is the periodic pass: it wakes pulls whose queue has grown past
// them (whatever the tags: the read decides) or whose time is up.
func (h *holdService) check(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, list := range h.held {
		max := h.queueEnd(k)
		for _, p := range list {
			switch {
			case p.offset < max:
				h.wakeLocked(p, wokeGrown)
			case !now.Before(p.deadline):
				h.wakeLocked(p, wokeTimeout)
			}
		}
	}
}

// wakeGroup answers the held pulls of a consumer group: its members
// changed, so each member hears of it now rather than at its next
// heartbeat or rebalance (issue #14: a joining member's queues were
// consumed by the old member too for ~20 s), or its offsets were reset
// (resets.go). Both are seldom; the pass is over every held pull.
func (h *holdService) wakeGroup(group string) {
	h.wakeEach(wokeGroup, func(p *heldPull) bool { return p.group == group })
}

// wakeAll answers every held pull (leadership lost, store failed,
// shutdown).
func (h *holdService) wakeAll() {
	h.wakeEach(wokeNotMaster, func(*heldPull) bool { return true })
}

func (h *holdService) size() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

func anyIn(a, b []int64) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}
