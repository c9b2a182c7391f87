package rocketmq

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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
	c, err := consumer.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		consumer.WithGroupName("rmq-consumers"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]int{}
	var sample *primitive.MessageExt
	err = c.Subscribe("to-rmq", consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
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
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the official consumer read %d of 10 messages: %v", n, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
