package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
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

// The summary gives the mean latency beside the quantiles, on the line for
// people and in the JSON object (bench-local.sh reads it as NAME.client_ms).
func TestSummaryReportsTheMeanLatency(t *testing.T) {
	rec := newRecorder()
	rec.record(1, 1024, time.Millisecond)
	rec.record(1, 1024, 2*time.Millisecond)
	rec.record(1, 1024, 6*time.Millisecond)
	var out bytes.Buffer
	if err := printSummary(&out, rec, time.Second, benchFlags{json: true}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 2 lines and a JSON object, got:\n%s", out.String())
	}
	if !strings.HasSuffix(lines[1], "  mean 3.00") {
		t.Errorf("latency line %q: want it to end with the mean, 3.00 ms", lines[1])
	}
	var sum map[string]float64
	if err := json.Unmarshal([]byte(lines[2]), &sum); err != nil {
		t.Fatalf("JSON summary %q: %v", lines[2], err)
	}
	if m, ok := sum["mean_ms"]; !ok || math.Abs(m-3) > 0.01 {
		t.Errorf("mean_ms %v (present %v), want 3", m, ok)
	}
	if sum["sent"] != 3 || sum["p50_ms"] != 2 {
		t.Errorf("sent %v, p50_ms %v: want 3 and 2", sum["sent"], sum["p50_ms"])
	}
}
