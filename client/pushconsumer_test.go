package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
)

func fastPush(id string) PushConfig {
	return PushConfig{
		ConsumeFrom: ConsumeFromFirst, ClientID: id, PullSuspend: time.Second,
		RebalanceInterval: 100 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond, CommitInterval: 50 * time.Millisecond,
		RetryDelay: 100 * time.Millisecond, ErrorBackoff: 100 * time.Millisecond,
	}
}

// tally counts deliveries per body.
type tally struct {
	mu   sync.Mutex
	seen map[string]int
}

func (t *tally) add(msgs []*MessageExt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range msgs {
		t.seen[string(m.Body)]++
	}
}

func (t *tally) distinct() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.seen)
}

func (t *tally) duplicates() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := 0
	for _, n := range t.seen {
		d += n - 1
	}
	return d
}

func (c *testCluster) pushConsumer(cfg PushConfig, topic string, l MessageListener) *PushConsumer {
	c.t.Helper()
	pc, err := NewPushConsumer(cfg, WithNameServers(c.ns.Addr()), WithGroup("pg"), WithLogger(quiet))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := pc.Subscribe(topic, "*", l); err != nil {
		c.t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		c.t.Fatal(err)
	}
	return pc
}

// checkShares waits until the consumers' queues are disjoint and cover all
// n queues.
func checkShares(t *testing.T, n int, consumers ...*PushConsumer) {
	t.Helper()
	checkSharesWithin(t, 10*time.Second, n, consumers...)
}

// Rebalance 1 -> 3 -> 1 under load: the queues are disjoint and all
// covered at each step, offsets carry over, and every message is consumed
// at least once.
func TestPushConsumersRebalanceAndConsumeEverything(t *testing.T) {
	c := newCluster(t, 2, 1, nil)
	c.createTopic("push", 4)
	p := c.producer()
	defer p.Shutdown()
	sent := 0
	send := func(n int) {
		for i := 0; i < n; i++ {
			if _, err := p.Send(context.Background(), &Message{Topic: "push", Body: []byte(bodyOf(sent))}); err != nil {
				t.Fatal(err)
			}
			sent++
		}
	}
	send(200)
	got := &tally{seen: map[string]int{}}
	listener := func(_ context.Context, msgs []*MessageExt) ConsumeResult { got.add(msgs); return ConsumeSuccess }
	a := c.pushConsumer(fastPush("a"), "push", listener)
	checkShares(t, 8, a)
	clustertest.WaitFor(t, 10*time.Second, "first 200 consumed", func() bool { return got.distinct() == 200 })

	b := c.pushConsumer(fastPush("b"), "push", listener)
	d := c.pushConsumer(fastPush("c"), "push", listener)
	checkShares(t, 8, a, b, d)
	send(200)
	clustertest.WaitFor(t, 10*time.Second, "400 consumed by three", func() bool { return got.distinct() == 400 })

	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := d.Shutdown(); err != nil {
		t.Fatal(err)
	}
	checkShares(t, 8, a)
	send(200)
	clustertest.WaitFor(t, 10*time.Second, "600 consumed after shrinking back", func() bool { return got.distinct() == 600 })
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Offsets carried over: duplicates only around the handovers (a new
	// owner may start before the old one's last commit lands). Had the
	// offsets not carried over, every queue handed over would be read again
	// from the first message (ConsumeFromFirst): 400 duplicates and more.
	if dups := got.duplicates(); dups >= 300 {
		t.Fatalf("%d duplicate deliveries of 600 messages", dups)
	}
	t.Logf("600 messages, %d duplicates", got.duplicates())
	// A new member of the group starts where the group committed.
	again := &tally{seen: map[string]int{}}
	e := c.pushConsumer(fastPush("e"), "push", func(_ context.Context, msgs []*MessageExt) ConsumeResult { again.add(msgs); return ConsumeSuccess })
	checkShares(t, 8, e)
	send(10)
	clustertest.WaitFor(t, 10*time.Second, "new messages to a restarted group", func() bool { return again.distinct() >= 10 })
	e.Shutdown()
	if again.distinct() > 10+20 {
		t.Fatalf("a restarted group re-read %d messages", again.distinct())
	}
}

// A slow listener: each process queue stays under the flow-control bound
// (the threshold, plus at most one pull's batch).
func TestPushFlowControlBoundsProcessQueues(t *testing.T) {
	c := newCluster(t, 1, 1, nil)
	c.createTopic("slow", 1)
	p := c.producer()
	defer p.Shutdown()
	batch := make([]*Message, 500)
	for i := range batch {
		batch[i] = &Message{Topic: "slow", Body: []byte(bodyOf(i))}
	}
	if _, err := p.SendBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	// Without flow control, 8 busy workers, 8 queued tasks and a pulled
	// batch of 8 could be held (24); the threshold must keep it to 4 + 8.
	cfg := fastPush("slow")
	cfg.MaxCachedMessages = 4
	cfg.PullBatch = 8
	cfg.Workers = 8
	got := &tally{seen: map[string]int{}}
	pc := c.pushConsumer(cfg, "slow", func(_ context.Context, msgs []*MessageExt) ConsumeResult {
		time.Sleep(5 * time.Millisecond)
		got.add(msgs)
		return ConsumeSuccess
	})
	defer pc.Shutdown()
	peak := 0
	// Sample the process queues until all is consumed.
	clustertest.WaitFor(t, 30*time.Second, "all 500 consumed", func() bool {
		for _, pq := range pc.rb.processQueues() {
			n, _, _ := pq.load()
			peak = max(peak, n)
		}
		return got.distinct() >= 500
	})
	if bound := cfg.MaxCachedMessages + int(cfg.PullBatch); peak > bound {
		t.Fatalf("a process queue held %d messages; bound %d", peak, bound)
	}
	if peak == 0 {
		t.Fatal("never saw a message held")
	}
	t.Logf("peak %d messages held", peak)
}

// Messages the listener asks to retry (or panics on) come again, counted.
func TestPushRetryLaterAndPanicRedeliver(t *testing.T) {
	c := newCluster(t, 1, 1, nil)
	c.createTopic("retry", 1)
	p := c.producer()
	defer p.Shutdown()
	for _, b := range []string{"fail-once", "panic-once", "fine"} {
		if _, err := p.Send(context.Background(), &Message{Topic: "retry", Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	times := map[string][]int{}
	pc := c.pushConsumer(fastPush("r"), "retry", func(_ context.Context, msgs []*MessageExt) ConsumeResult {
		m := msgs[0]
		mu.Lock()
		times[string(m.Body)] = append(times[string(m.Body)], m.ReconsumeTimes)
		n := len(times[string(m.Body)])
		mu.Unlock()
		switch {
		case string(m.Body) == "fail-once" && n == 1:
			return ConsumeRetryLater
		case string(m.Body) == "panic-once" && n == 1:
			panic("listener bug")
		}
		return ConsumeSuccess
	})
	clustertest.WaitFor(t, 10*time.Second, "redeliveries", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(times["fail-once"]) == 2 && len(times["panic-once"]) == 2 && len(times["fine"]) == 1
	})
	pc.Shutdown()
	for _, b := range []string{"fail-once", "panic-once"} {
		if times[b][0] != 0 || times[b][1] != 1 {
			t.Fatalf("%s reconsume times %v, want [0 1]", b, times[b])
		}
	}
}

// A message that keeps failing is retried through the broker (its retry
// topic, after the delay levels), then lands in the dead-letter topic.
func TestPushDeadLetterAfterMaxRetries(t *testing.T) {
	c := newCluster(t, 1, 1, nil)
	c.createTopic("dl", 1)
	p := c.producer()
	defer p.Shutdown()
	if _, err := p.Send(context.Background(), &Message{Topic: "dl", Tags: "T", Keys: []string{"poison"}, Body: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var deliveries []int
	cfg := fastPush("dl")
	cfg.MaxReconsumeTimes = 2
	pc := c.pushConsumer(cfg, "dl", func(_ context.Context, msgs []*MessageExt) ConsumeResult {
		mu.Lock()
		defer mu.Unlock()
		if msgs[0].Topic != "dl" || string(msgs[0].Body) != "poison" {
			t.Errorf("delivered %s %q", msgs[0].Topic, msgs[0].Body)
		}
		deliveries = append(deliveries, msgs[0].ReconsumeTimes)
		return ConsumeRetryLater
	})
	defer pc.Shutdown()
	pull := c.pullConsumer("inspector", WithDeadLetterReads())
	defer pull.Shutdown()
	var dead []*MessageExt
	clustertest.WaitFor(t, 15*time.Second, "message in the dead-letter topic", func() bool {
		mqs, err := pull.Queues(context.Background(), DLQTopic("pg"))
		if err != nil || len(mqs) == 0 {
			return false
		}
		r, err := pull.Pull(context.Background(), mqs[0], "*", 0, 8)
		if err != nil {
			return false
		}
		dead = r.Messages
		return len(dead) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	// First delivery, then two retries through the broker.
	if len(deliveries) != 3 || deliveries[0] != 0 || deliveries[1] != 1 || deliveries[2] != 2 {
		t.Fatalf("deliveries with reconsume times %v, want [0 1 2]", deliveries)
	}
	if string(dead[0].Body) != "poison" || dead[0].Properties["RETRY_TOPIC"] != "dl" || dead[0].Keys[0] != "poison" {
		t.Fatalf("dead letter %+v", dead[0])
	}
	// Created neither readable nor writable: a consumer without
	// WithDeadLetterReads cannot read it, nor a producer send to it.
	plain := c.pullConsumer("plain")
	defer plain.Shutdown()
	if _, err := plain.Queues(context.Background(), DLQTopic("pg")); !errors.Is(err, ErrTopicNotReadable) {
		t.Fatalf("a plain consumer's queues of the dead-letter topic: %v", err)
	}
	if _, err := p.Send(context.Background(), &Message{Topic: DLQTopic("pg"), Body: []byte("sneak")}); err == nil {
		t.Fatal("a producer sent to the dead-letter topic")
	}
}

func TestAllocateStrategies(t *testing.T) {
	var queues []MessageQueue
	for g := 0; g < 2; g++ {
		for q := int32(0); q < 5; q++ {
			queues = append(queues, MessageQueue{"t", fmt.Sprintf("g%d", g), q})
		}
	}
	for name, strategy := range map[string]AllocateStrategy{"averagely": AllocateAveragely, "circle": AllocateCircle} {
		for n := 1; n <= 12; n++ {
			var members []string
			for i := 0; i < n; i++ {
				members = append(members, fmt.Sprintf("m%02d", i))
			}
			seen := map[MessageQueue]int{}
			for _, m := range members {
				share := strategy(m, members, queues)
				if len(share) > (len(queues)+n-1)/n {
					t.Fatalf("%s, %d members: %s got %d queues", name, n, m, len(share))
				}
				for _, q := range share {
					seen[q]++
				}
			}
			for _, q := range queues {
				if seen[q] != 1 {
					t.Fatalf("%s, %d members: queue %v assigned %d times", name, n, q, seen[q])
				}
			}
		}
		if got := strategy("stranger", []string{"a", "b"}, queues); got != nil {
			t.Fatalf("%s gave a non-member %v", name, got)
		}
	}
}

// Orderly: per sharding key, the listener sees messages in send order,
// even when it asks to retry one of them; two members share the queues,
// each queue locked by one.
func TestPushOrderlyKeepsQueueOrder(t *testing.T) {
	c := newCluster(t, 1, 1, nil)
	c.createTopic("ord", 4)
	p := c.producer()
	defer p.Shutdown()
	const keys, per = 6, 30
	for i := 0; i < per; i++ {
		for k := 0; k < keys; k++ {
			if _, err := p.SendOrderly(context.Background(), &Message{Topic: "ord", Body: []byte(fmt.Sprintf("k%d-%03d", k, i))}, fmt.Sprint("key-", k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	seen := map[string][]string{} // key -> bodies in consumption order
	failed := false
	listener := func(_ context.Context, msgs []*MessageExt) ConsumeResult {
		mu.Lock()
		defer mu.Unlock()
		body := string(msgs[0].Body)
		if body == "k2-010" && !failed {
			failed = true
			return ConsumeRetryLater
		}
		k := body[:2]
		seen[k] = append(seen[k], body)
		return ConsumeSuccess
	}
	cfgA, cfgB := fastPush("oa"), fastPush("ob")
	cfgA.Orderly, cfgB.Orderly = true, true
	a := c.pushConsumer(cfgA, "ord", listener)
	b := c.pushConsumer(cfgB, "ord", listener)
	clustertest.WaitFor(t, 15*time.Second, "all consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range seen {
			n += len(v)
		}
		return n >= keys*per
	})
	a.Shutdown()
	b.Shutdown()
	for k := 0; k < keys; k++ {
		got := seen[fmt.Sprintf("k%d", k)]
		// Duplicates may appear around a rebalance; the order of first
		// deliveries must be the send order.
		var firsts []string
		dup := map[string]bool{}
		for _, body := range got {
			if !dup[body] {
				dup[body] = true
				firsts = append(firsts, body)
			}
		}
		if len(firsts) != per {
			t.Fatalf("key %d: %d distinct messages", k, len(firsts))
		}
		for i, body := range firsts {
			if want := fmt.Sprintf("k%d-%03d", k, i); body != want {
				t.Fatalf("key %d: position %d is %s, want %s", k, i, body, want)
			}
		}
	}
	if !failed {
		t.Fatal("the retry path was not taken")
	}
}

// Broadcasting: every member gets every message; offsets live in a local
// file and a restarted member resumes from it.
func TestPushBroadcastingWithLocalOffsets(t *testing.T) {
	c := newCluster(t, 1, 1, nil)
	c.createTopic("bc", 2)
	p := c.producer()
	defer p.Shutdown()
	send := func(from, n int) {
		for i := from; i < from+n; i++ {
			if _, err := p.Send(context.Background(), &Message{Topic: "bc", Body: []byte(bodyOf(i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(0, 20)
	dir := t.TempDir()
	member := func(name string, got *tally) *PushConsumer {
		cfg := fastPush(name)
		cfg.Broadcasting = true
		cfg.OffsetFile = dir + "/" + name + ".json"
		return c.pushConsumer(cfg, "bc", func(_ context.Context, msgs []*MessageExt) ConsumeResult { got.add(msgs); return ConsumeSuccess })
	}
	ga, gb := &tally{seen: map[string]int{}}, &tally{seen: map[string]int{}}
	a, b := member("a", ga), member("b", gb)
	clustertest.WaitFor(t, 10*time.Second, "both members get all 20", func() bool { return ga.distinct() == 20 && gb.distinct() == 20 })
	a.Shutdown()
	b.Shutdown()
	send(20, 5)
	again := &tally{seen: map[string]int{}}
	a = member("a", again)
	clustertest.WaitFor(t, 10*time.Second, "restarted member gets the new 5", func() bool { return again.distinct() >= 5 })
	a.Shutdown()
	if again.distinct() != 5 {
		t.Fatalf("restarted member re-read: %d messages", again.distinct())
	}
}

// A member known to one replica only, say a slave that became master just
// after a restart while the others had heard from it, still counts: the
// member list is the union over every replica.
func TestMembersAreTheUnionOverReplicas(t *testing.T) {
	c := newCluster(t, 1, 3, nil)
	c.createTopic("union", 2)
	pc := c.pushConsumer(fastPush("c1"), "union", func(context.Context, []*MessageExt) ConsumeResult { return ConsumeSuccess })
	defer pc.Shutdown()
	m := c.master("broker-a")
	slave := c.brokers["broker-a"][(m+1)%3]
	conn, err := grpc.NewClient(slave.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pb.NewBrokerClient(conn).Heartbeat(context.Background(), &pb.HeartbeatRequest{ClientId: "ghost",
		Groups: []*pb.ConsumerGroupInfo{{Group: "pg", Mode: pb.ConsumeMode_CLUSTERING, Subscriptions: []*pb.Subscription{{Topic: "union", Expression: "*"}}}}}); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 5*time.Second, "c1 and ghost listed", func() bool {
		members, err := pc.members(context.Background(), "union")
		return err == nil && slices.Equal(members, []string{"c1", "ghost"})
	})
}
