package main

import (
	"context"
	"testing"
	"time"
)

// The pacer gives the n-th message the due time n/rate after the start,
// whichever goroutine asks and however many messages it takes at once,
// and lets a sender behind its schedule go at once.
func TestPacerSpacesMessagesToTheRate(t *testing.T) {
	if newPacer(0, time.Now()) != nil {
		t.Fatal("rate 0 paces")
	}
	start := time.Unix(1_800_000_000, 0)
	p := newPacer(1000, start) // a message a millisecond
	for i, c := range []struct {
		n    int64
		want time.Duration
	}{{1, 0}, {1, time.Millisecond}, {64, 2 * time.Millisecond}, {1, 66 * time.Millisecond}} {
		if got := p.due(c.n).Sub(start); got != c.want {
			t.Errorf("send %d (%d messages) due at %v, want %v", i, c.n, got, c.want)
		}
	}
	behind := newPacer(10, time.Now().Add(-time.Hour))
	done := make(chan bool, 1)
	go func() { done <- behind.wait(context.Background(), 1) }()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("a sender behind its schedule was refused")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a sender behind its schedule waited")
	}
	ahead := newPacer(1, time.Now().Add(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ahead.wait(ctx, 1) {
		t.Fatal("a wait whose context ended went on")
	}
}
