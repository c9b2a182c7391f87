package client

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
)

// brokerFaults remembers the masters that recently left a send without an
// answer (it timed out, or the connection failed), so that round-robin
// sends steer around them for a while instead of each paying an attempt
// timeout until the name servers name a new master. It is RocketMQ's
// latency fault tolerance reduced to its useful core: a new master has
// another address, so it is never held against it. Orderly sends, bound to
// their queue, do not consult it.
type brokerFaults struct {
	isolation time.Duration // 0: off
	// last is when the latest isolation ends (unix ns): past it, nothing is
	// isolated, and the send path checks that without taking mu.
	last  atomic.Int64
	mu    sync.Mutex
	until map[string]time.Time // broker address -> isolated until
}

func newBrokerFaults(isolation time.Duration) *brokerFaults {
	return &brokerFaults{isolation: isolation, until: map[string]time.Time{}}
}

func (f *brokerFaults) mark(addr string, now time.Time) {
	if f.isolation <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.until[addr] = now.Add(f.isolation)
	f.last.Store(max(f.last.Load(), now.Add(f.isolation).UnixNano()))
	for a, t := range f.until { // forget the expired: the map stays as small as the faults
		if now.After(t) {
			delete(f.until, a)
		}
	}
}

func (f *brokerFaults) isolated(addr string, now time.Time) bool {
	if now.UnixNano() >= f.last.Load() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.until[addr]
	return ok && now.Before(t)
}

// anyIsolated reports whether the route names an isolated master.
func (f *brokerFaults) anyIsolated(route *pb.RouteResponse, now time.Time) bool {
	if now.UnixNano() >= f.last.Load() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range route.Groups {
		if t, ok := f.until[masterAddr(g.Replicas)]; ok && now.Before(t) {
			return true
		}
	}
	return false
}
