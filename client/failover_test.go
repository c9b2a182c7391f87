package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// Several producers and a group of two push consumers on 2 groups of 3
// replicas; one group's master is killed mid-stream. Every acknowledged
// message is consumed at least once, consumption resumes within 5 s of the
// kill, and the duplicates are counted.
func TestProduceConsumeThroughMasterKill(t *testing.T) {
	c := newCluster(t, 2, 3, nil)
	c.createTopic("stream", 4)
	var (
		mu      sync.Mutex
		acked   = map[string]bool{}
		afterA  atomic.Int64 // messages of broker-a stored after the kill, consumed
		killedA atomic.Int64 // unix ms of the kill
	)
	got := &tally{seen: map[string]int{}}
	listener := func(_ context.Context, msgs []*MessageExt) ConsumeResult {
		got.add(msgs)
		for _, m := range msgs {
			if k := killedA.Load(); k > 0 && m.Queue.Group == "broker-a" && m.StoreTime.UnixMilli() > k {
				afterA.Add(1)
			}
		}
		return ConsumeSuccess
	}
	ca := c.pushConsumer(fastPush("ca"), "stream", listener)
	cb := c.pushConsumer(fastPush("cb"), "stream", listener)
	checkShares(t, 8, ca, cb)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	defer halt() // also when a wait below fails: no sender outlives the test
	for s := 0; s < 3; s++ {
		p := c.producer(WithSendTimeout(10*time.Second), WithRetries(10))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.Shutdown()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf("p%d-%d", s, i)
				if _, err := p.Send(context.Background(), &Message{Topic: "stream", Body: []byte(body)}); err != nil {
					t.Errorf("send %s: %v", body, err)
					return
				}
				mu.Lock()
				acked[body] = true
				mu.Unlock()
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	clustertest.WaitFor(t, 20*time.Second, "traffic", func() bool { return count() > 100 && got.distinct() > 50 })

	m := c.master("broker-a")
	killed := time.Now()
	killedA.Store(killed.UnixMilli())
	c.stop("broker-a", m)
	// The killed group's queues are consumed again: messages stored there
	// by its new master reach the consumers.
	clustertest.WaitFor(t, 5*time.Second, "consumption of the killed group resumes", func() bool { return afterA.Load() > 10 })
	resumed := time.Since(killed)
	sent := count()
	clustertest.WaitFor(t, 20*time.Second, "more traffic after failover", func() bool { return count() > sent+100 })
	halt()
	if t.Failed() {
		return
	}
	clustertest.WaitFor(t, 20*time.Second, "every acked message consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		got.mu.Lock()
		defer got.mu.Unlock()
		for body := range acked {
			if got.seen[body] == 0 {
				return false
			}
		}
		return true
	})
	ca.Shutdown()
	cb.Shutdown()
	t.Logf("%d acked, all consumed; %d duplicate deliveries; consumption resumed within %v of the kill", count(), got.duplicates(), resumed.Round(time.Millisecond))
}
