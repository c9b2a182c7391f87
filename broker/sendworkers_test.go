package broker

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A task runs on an idle worker, on a goroutine of its own when every
// worker is busy, and still runs once the workers stopped.
func TestSendWorkersRunEveryTask(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{ctx: ctx}
	w := b.startSendWorkers(1)
	hold := make(chan struct{})
	var ran sync.WaitGroup
	ran.Add(3)
	w.tasks <- func() { <-hold; ran.Done() } // the only worker, busy until hold closes
	w.do(func() { ran.Done() })              // none idle: a goroutine of its own
	close(hold)
	cancel()
	b.wg.Wait() // the worker stopped
	w.do(func() { ran.Done() })
	done := make(chan struct{})
	go func() { ran.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a task given to the workers never ran")
	}
}
