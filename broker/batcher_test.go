package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// entryStats is how many send entries the broker put through Raft and how
// many messages they carried (raftmq_raft_entry_messages).
func entryStats(t *testing.T, b *Broker) (entries uint64, messages float64) {
	t.Helper()
	fams, err := b.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "raftmq_raft_entry_messages" {
			h := f.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatal("no raftmq_raft_entry_messages metric")
	return 0, 0
}

// Concurrent sync sends share entries (and so appends and fsyncs); a lone
// send gets an entry of its own, carrying only itself.
func TestGroupCommitMergesConcurrentSends(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("gc", 4)
	m := g.master()
	b := g.brokers[m]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	e0, n0 := entryStats(t, b)
	if _, err := g.client(m).SendMessage(ctx, oneMessage("gc", 0, "alone")); err != nil {
		t.Fatal(err)
	}
	if e, n := entryStats(t, b); e != e0+1 || n != n0+1 {
		t.Fatalf("a lone send made %d entries of %v messages, want 1 of 1", e-e0, n-n0)
	}

	const senders, rounds = 64, 4
	e0, n0 = entryStats(t, b)
	// The in-flight slots, taken by lone sends and by the batcher's loop
	// alike, stay within the cap while the sends race for them.
	sampled := make(chan int32)
	stop := make(chan struct{})
	go func() {
		var most int32
		for {
			select {
			case <-stop:
				sampled <- most
				return
			default:
				most = max(most, b.batcher.inflight.Load())
			}
		}
	}()
	for r := range rounds {
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, senders)
		for s := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := g.client(m).SendMessage(ctx, oneMessage("gc", int32(s%4), fmt.Sprintf("r%d-s%d", r, s)))
				errs <- err
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	if most := <-sampled; most > int32(b.cfg.MaxInflightEntries) {
		t.Fatalf("%d entries in flight at once, cap %d", most, b.cfg.MaxInflightEntries)
	}
	// Every slot and every queued send is accounted for once all are
	// answered: a slot kept would leave later sends waiting for ever.
	deadline := time.Now().Add(5 * time.Second)
	for b.batcher.inflight.Load() != 0 || b.batcher.queued.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after every send was answered: %d entries in flight, %d sends queued", b.batcher.inflight.Load(), b.batcher.queued.Load())
		}
		time.Sleep(time.Millisecond)
	}
	e, n := entryStats(t, b)
	if n-n0 != senders*rounds {
		t.Fatalf("entries carried %v messages, want %d", n-n0, senders*rounds)
	}
	// Each round's first send may go alone; the others wait for it and
	// share what comes next. An entry per send would be 256 entries.
	if per := (n - n0) / float64(e-e0); per < 4 {
		t.Fatalf("%d concurrent sends x %d made %d entries, %.1f messages each: group commit did not merge them", senders, rounds, e-e0, per)
	}
}
