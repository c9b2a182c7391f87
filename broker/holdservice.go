package broker

import (
	"slices"
	"sync"
	"time"
)

// holdService keeps the pulls that found nothing, per topic@queue, until a
// message arrives for them, their suspend timeout passes, their client goes
// away, their consumer group's members change (the answer tells the
// member to rebalance) or its offsets are reset, or this replica stops
// being master (RocketMQ's
// PullRequestHoldService). Each held pull belongs to the gRPC handler
// goroutine that waits on it; waking it closes its channel, and the
// handler reads the queue again and answers.
//
// No lost wake-up: the handler registers before it re-checks the queue's
// end (see pullservice.go), and an arrival wakes every pull registered
// below the new end, so a message that lands between the failed read and
// the registration is seen by one or the other.
type holdService struct {
	mu        sync.Mutex
	held      map[queueKey][]*heldPull
	count     int
	max       int
	perClient map[string]int // held pulls by heldPull.client
	maxClient int
}

type queueKey struct {
	topic string
	queue int32
}

type heldPull struct {
	client    string // who holds it (clientKey), for the per-client cap
	group     string // the consumer group pulling
	key       queueKey
	offset    int64   // the offset the pull waits beyond
	tagHashes []int64 // nil: any message wakes it
	deadline  time.Time
	wake      chan struct{} // closed once
	woken     bool          // guarded by holdService.mu
}

func newHoldService(max, maxPerClient int) *holdService {
	return &holdService{held: map[queueKey][]*heldPull{}, max: max, perClient: map[string]int{}, maxClient: maxPerClient}
}

// hold registers a pull; false when the cap on held pulls, or on its
// client's, is reached.
func (h *holdService) hold(p *heldPull) bool {
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

// release removes a pull that is done waiting (answered, expired or
// cancelled). Safe to call after it was woken.
func (h *holdService) release(p *heldPull) {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.held[p.key]
	if i := slices.Index(list, p); i >= 0 {
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
}

// wakeLocked wakes p once. Caller holds mu.
func (h *holdService) wakeLocked(p *heldPull) {
	if !p.woken {
		p.woken = true
		close(p.wake)
	}
}

// arrived wakes the pulls of a queue that wait below its new end and whose
// filter matches one of the arrived tags (tagHashes of the new messages).
func (h *holdService) arrived(k queueKey, newMax int64, tagHashes []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.held[k] {
		if p.offset < newMax && (p.tagHashes == nil || anyIn(tagHashes, p.tagHashes)) {
			h.wakeLocked(p)
		}
	}
}

// check is the periodic pass: it wakes pulls whose queue has grown past
// them (whatever the tags: the read decides) or whose time is up.
func (h *holdService) check(now time.Time, queueMax func(queueKey) int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, list := range h.held {
		max := queueMax(k)
		for _, p := range list {
			if p.offset < max || !now.Before(p.deadline) {
				h.wakeLocked(p)
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
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, list := range h.held {
		for _, p := range list {
			if p.group == group {
				h.wakeLocked(p)
			}
		}
	}
}

// wakeAll answers every held pull (leadership lost, shutdown).
func (h *holdService) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, list := range h.held {
		for _, p := range list {
			h.wakeLocked(p)
		}
	}
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
