package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// defaultPush is a push consumer at the default rebalance (20 s) and
// heartbeat (30 s) intervals: what users run, which the fast intervals of
// the other tests would hide.
func defaultPush(id string) PushConfig {
	return PushConfig{ConsumeFrom: ConsumeFromFirst, ClientID: id, PullSuspend: time.Second, RetryDelay: 100 * time.Millisecond}
}

// A push consumer started before its topic exists gets the topic's queues
// as soon as the route appears, not at the next heartbeat and rebalance
// (issue #14, bug 1: 0 queues for ~40 s). The bound of 5 s is far below
// the 20 s rebalance interval and the 30 s heartbeat interval.
func TestPushConsumerTakesQueuesOnceTheRouteAppears(t *testing.T) {
	c := newCluster(t, 1, 1, nil)
	var got atomic.Int32
	pc := c.pushConsumer(defaultPush("early"), "fresh", func(_ context.Context, msgs []*MessageExt) ConsumeResult {
		got.Add(int32(len(msgs)))
		return ConsumeSuccess
	})
	defer pc.Shutdown()
	c.createTopic("fresh", 2) // returns once the name server routes it
	p := c.producer()
	defer p.Shutdown()
	if _, err := p.Send(context.Background(), &Message{Topic: "fresh", Body: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 5*time.Second, "the early consumer's queues and its message", func() bool {
		pc.mu.Lock()
		n := len(pc.queues)
		pc.mu.Unlock()
		return n == 2 && got.Load() == 1
	})
}

// The first redelivery after ConsumeRetryLater comes after the retry
// delay, not after the next rebalance picks up the group's new %RETRY%
// topic (issue #14, bug 4: 20 s). RetryDelay here is 100 ms, and the
// broker's delay levels start at 50 ms (newCluster).
func TestPushRetryTopicTakenAtOnce(t *testing.T) {
	c := newCluster(t, 1, 1, nil)
	c.createTopic("later", 1)
	p := c.producer()
	defer p.Shutdown()
	if _, err := p.Send(context.Background(), &Message{Topic: "later", Body: []byte("again")}); err != nil {
		t.Fatal(err)
	}
	var deliveries atomic.Int32
	pc := c.pushConsumer(defaultPush("r"), "later", func(_ context.Context, msgs []*MessageExt) ConsumeResult {
		if deliveries.Add(1) == 1 {
			return ConsumeRetryLater
		}
		return ConsumeSuccess
	})
	defer pc.Shutdown()
	clustertest.WaitFor(t, 5*time.Second, "the redelivery through the retry topic", func() bool { return deliveries.Load() == 2 })
}
