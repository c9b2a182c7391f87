package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// Shutdown waits for the async and one-way sends handed to it: each is
// sent, not failed with "shut down" (issue #14, bug 2: `raftmq produce
// --mode oneway` stored 2 of 3 messages and exited 0).
func TestShutdownDrainsAsyncAndOnewaySends(t *testing.T) {
	c := newCluster(t, 1, 1, nil)
	c.createTopic("drain", 2)
	p := c.producer()
	const n = 40
	var mu sync.Mutex
	var failed []error
	for i := 0; i < n; i++ {
		body := []byte(fmt.Sprintf("async-%d", i))
		if err := p.SendAsync(context.Background(), &Message{Topic: "drain", Body: body}, func(_ *SendResult, err error) {
			if err != nil {
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
			}
		}); err != nil {
			t.Fatal(err)
		}
		if err := p.SendOneway(context.Background(), &Message{Topic: "drain", Body: []byte(fmt.Sprintf("oneway-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 {
		t.Fatalf("%d async sends failed at shutdown, the first: %v", len(failed), failed[0])
	}
	if err := p.SendAsync(context.Background(), &Message{Topic: "drain", Body: []byte("late")}, func(*SendResult, error) {}); err == nil {
		t.Fatal("an async send accepted after Shutdown")
	}
	pc := c.pullConsumer("drainers")
	defer pc.Shutdown()
	if got := len(drain(t, pc, "drain")); got != 2*n {
		t.Fatalf("%d messages stored, want %d", got, 2*n)
	}
}
