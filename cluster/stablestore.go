package cluster

import (
	"errors"
	"sync"

	"github.com/hashicorp/raft"
)

// closingStable is Raft's stable store (term and vote), closed only when no
// write is in flight, and taking none after.
//
// hashicorp/raft v1.7.3 handles a heartbeat on the transport's goroutine,
// not its main loop (NetworkTransport's heartbeat fast path), and neither
// Raft.Shutdown nor NetworkTransport.Close waits for one in progress. A
// heartbeat from a leader at a new term that lands while the node closes
// then saves the term into a closed bolt file, and raft panics ("failed to
// save current term: database not open"; seen under the race detector).
// After Close, writes are dropped: the node has stopped and answers no one,
// and a term it learned while stopping is learned again from the leader
// when it restarts. (Votes are cast on the main loop, which has stopped.)
type closingStable struct {
	raft.StableStore
	mu     sync.RWMutex
	closed bool
	close  func() error
}

var errStableClosed = errors.New("cluster: raft stable store closed")

func newClosingStable(s raft.StableStore, close func() error) *closingStable {
	return &closingStable{StableStore: s, close: close}
}

func (c *closingStable) Set(k, v []byte) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil
	}
	return c.StableStore.Set(k, v)
}

func (c *closingStable) SetUint64(k []byte, v uint64) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil
	}
	return c.StableStore.SetUint64(k, v)
}

func (c *closingStable) Get(k []byte) ([]byte, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, errStableClosed
	}
	return c.StableStore.Get(k)
}

func (c *closingStable) GetUint64(k []byte) (uint64, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return 0, errStableClosed
	}
	return c.StableStore.GetUint64(k)
}

// Close waits for writes in flight, then closes the store.
func (c *closingStable) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.close()
}
