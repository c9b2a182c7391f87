package rocketmq

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// The official push consumer (clustering, from the first offset) reads
// over the remoting protocol what raftmq's own producer sent: every
// message once, with body, tags, keys and properties intact.
func TestOfficialPushConsumerReadsNativeSends(t *testing.T) {
	ns := startDev(t)
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "to-rmq", "--queues", "2")
	for i := 0; i < 10; i++ {
		raftmq(t, "produce", "--namesrv", ns, "--topic", "to-rmq", "--tag", "TagB", "--key", fmt.Sprintf("key-%d", i), "--body", fmt.Sprintf("native-%d", i))
	}
	waitRoute(t, ns, "to-rmq")
	var mu sync.Mutex
	got := map[string]int{}
	var sample *primitive.MessageExt
	startConsumer(t, ns, "rmq-consumers", "to-rmq", func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			got[string(m.Body)]++
			if string(m.Body) == "native-3" {
				sample = m
			}
		}
		return consumer.ConsumeSuccess, nil
	})
	waitUntil(t, 30*time.Second, "the official consumer reading the 10 messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 10
	})
	mu.Lock()
	defer mu.Unlock()
	for body, n := range got {
		if n != 1 || !strings.HasPrefix(body, "native-") {
			t.Fatalf("deliveries %v, want each native-N once", got)
		}
	}
	if sample.GetTags() != "TagB" || sample.GetKeys() != "key-3" || sample.Topic != "to-rmq" || sample.MsgId == "" {
		t.Fatalf("native-3 as the official consumer read it: topic %s tags %q keys %q id %q", sample.Topic, sample.GetTags(), sample.GetKeys(), sample.MsgId)
	}
}

// The official push consumer at its default, ConsumeFromLastOffset,
// started after the first sends to a new topic, reads them: the broker
// answers its offset query with 0 for a young queue, as RocketMQ's does
// (ConsumerManageProcessor), where the client would otherwise start at
// the queue's end. RocketMQ's quickstart (a producer, then a consumer)
// relies on it.
func TestOfficialConsumerFromLastReadsANewTopicFromItsStart(t *testing.T) {
	ns := startDev(t)
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "quickstart", "--queues", "2")
	for i := 0; i < 6; i++ {
		raftmq(t, "produce", "--namesrv", ns, "--topic", "quickstart", "--body", fmt.Sprintf("before-%d", i))
	}
	waitRoute(t, ns, "quickstart")
	var mu sync.Mutex
	got := map[string]int{}
	startConsumer(t, ns, "rmq-late", "quickstart", func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			got[string(m.Body)]++
		}
		return consumer.ConsumeSuccess, nil
	}, consumer.WithConsumeFromWhere(consumer.ConsumeFromLastOffset))
	waitUntil(t, 30*time.Second, "the official consumer reading the 6 messages sent before it started", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 6
	})
	mu.Lock()
	defer mu.Unlock()
	for body, n := range got {
		if n != 1 || !strings.HasPrefix(body, "before-") {
			t.Fatalf("deliveries %v, want each before-N once", got)
		}
	}
}

// ConsumeRetryLater once: the official consumer sends the message back
// (code 36), and it is delivered again through the group's retry topic
// with ReconsumeTimes 1, after the first retry's delay (level 3, 300 ms
// with these levels). The broker creates the retry topic on the group's
// first heartbeat, as RocketMQ's does; the client, which asked for routes
// just before, learns its route at its next poll of the name server,
// every 30 s (fixed in the client): the redelivery can wait for that.
func TestOfficialConsumerRetriesThroughTheBroker(t *testing.T) {
	ns := startDev(t, "--delay-levels", "100ms 200ms 300ms 400ms 500ms")
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "retry-rmq", "--queues", "1")
	raftmq(t, "produce", "--namesrv", ns, "--topic", "retry-rmq", "--body", "retry-me")
	waitRoute(t, ns, "retry-rmq")
	var mu sync.Mutex
	var times []int32
	startConsumer(t, ns, "rmq-retriers", "retry-rmq", func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if string(m.Body) == "retry-me" {
				times = append(times, m.ReconsumeTimes)
			}
		}
		if len(times) == 1 {
			return consumer.ConsumeRetryLater, nil
		}
		return consumer.ConsumeSuccess, nil
	})
	waitUntil(t, 70*time.Second, "the redelivery", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(times) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	if times[0] != 0 || times[1] != 1 {
		t.Fatalf("reconsume times %v, want [0 1]", times)
	}
}

// startConsumer starts the official push consumer of group on topic
// (clustering, from the first offset, unless opts say otherwise), shut
// down when the test ends if not before.
func startConsumer(t *testing.T, ns, group, topic string, listener func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error),
	opts ...consumer.Option) rocketmq.PushConsumer {
	t.Helper()
	c, err := consumer.NewPushConsumer(append([]consumer.Option{consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		consumer.WithGroupName(group), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, listener); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Shutdown() })
	return c
}
