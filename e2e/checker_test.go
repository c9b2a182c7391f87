package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The checker finds each kind of fault in a made-up history.
func TestCheckerFindsFaults(t *testing.T) {
	h := &History{}
	t0 := time.Now()
	h.Sent(Send{Producer: "p", Seq: 0, Body: "a", Outcome: Acked, At: t0})
	h.Sent(Send{Producer: "p", Seq: 1, Body: "b", Outcome: Acked, At: t0.Add(2 * time.Second)}) // a 2 s gap
	h.Sent(Send{Producer: "p", Seq: 2, Body: "c", Outcome: Unknown, At: t0.Add(3 * time.Second), Err: "deadline exceeded"})
	h.Sent(Send{Producer: "p", Seq: 3, Body: "d", Outcome: Acked, At: t0.Add(3 * time.Second)}) // lost
	h.Sent(Send{Producer: "p", Seq: 4, Body: "e", Outcome: Failed, At: t0.Add(3 * time.Second)})
	h.Delivered(Delivery{Body: "b", Queue: "q", Offset: 0}) // b stored before a: an order break
	h.Delivered(Delivery{Body: "a", Queue: "q", Offset: 1})
	h.Delivered(Delivery{Body: "a", Queue: "q", Offset: 1}) // a duplicate
	h.Delivered(Delivery{Body: "c", Queue: "q", Offset: 2})
	h.Delivered(Delivery{Body: "c", Queue: "q", Offset: 3}) // stored twice: an unknown send retried
	h.Delivered(Delivery{Body: "e", Queue: "q", Offset: 4}) // refused, yet consumed
	h.Delivered(Delivery{Body: "zz", Queue: "q", Offset: 5})
	h.Replica(Checksum{Group: "g", Replica: "1", ToOffset: 100, SHA256: "aa"})
	h.Replica(Checksum{Group: "g", Replica: "2", ToOffset: 100, SHA256: "aa"})
	h.Replica(Checksum{Group: "g", Replica: "3", ToOffset: 100, SHA256: "ab"}) // diverged
	h.Replica(Checksum{Group: "h", Replica: "1", ToOffset: 50, SHA256: "cc"})
	h.Replica(Checksum{Group: "h", Replica: "2", ToOffset: 60, SHA256: "cc"}) // not in step
	r := h.Check()
	if r.Acked != 3 || r.Unknown != 1 || r.Failed != 1 {
		t.Fatalf("counts: %s", r)
	}
	if len(r.Lost) != 1 || r.Lost[0] != "d" {
		t.Fatalf("lost %v", r.Lost)
	}
	if len(r.Unexpected) != 2 {
		t.Fatalf("unexpected %v", r.Unexpected)
	}
	if r.DupOther != 1 || r.DupFromUnknown != 1 {
		t.Fatalf("duplicates %d / %d", r.DupOther, r.DupFromUnknown)
	}
	if !slices.Equal(r.SendErrors, []string{"1× deadline exceeded"}) || !strings.Contains(r.String(), "unknown 1 [1× deadline exceeded]") {
		t.Fatalf("send errors %q in %s", r.SendErrors, r)
	}
	if r.InFlight != -1 {
		t.Fatalf("in flight %d without a window taken", r.InFlight)
	}
	if len(r.OrderBreaks) != 1 {
		t.Fatalf("order breaks %v", r.OrderBreaks)
	}
	if len(r.Divergent) != 2 || r.Replicas != 5 {
		t.Fatalf("divergent %v of %d", r.Divergent, r.Replicas)
	}
	if len(r.WriteGaps) != 1 || r.WriteGaps[0] != 2*time.Second {
		t.Fatalf("write gaps %v", r.WriteGaps)
	}
	if r.OK() || h.Consumed() {
		t.Fatal("a faulty history passed")
	}
	if r.NotStored != nil {
		t.Fatalf("not stored %v without a read-back", r.NotStored)
	}
	// Read back after the drill: a, consumed during it, is gone from the store.
	h.ReadBack("b", "q@1")
	h.ReadBack("d", "q@3")
	h.ReadBack("b", "q@1") // read twice from one place: stored once
	if r := h.Check(); len(r.NotStored) != 1 || r.NotStored[0] != "a" || h.AllReadBack() || r.StoredTwice != 0 {
		t.Fatalf("not stored %v, stored twice %d", r.NotStored, r.StoredTwice)
	}
	h.ReadBack("b", "q@4") // a retry stored again
	if r := h.Check(); r.StoredTwice != 1 {
		t.Fatalf("stored twice %d, want 1", r.StoredTwice)
	}
	if got := h.NotStoredByQueue(); len(got) != 1 || got[""] != 1 {
		t.Fatalf("not stored by queue %v", got)
	}
	// Duplicates by member: a message delivered to another member than
	// its first (two members on one queue) is told from one delivered
	// again to the same member, and the queues are named.
	byMember := &History{}
	byMember.Sent(Send{Producer: "p", Seq: 0, Body: "x", Outcome: Acked, At: t0})
	byMember.Sent(Send{Producer: "p", Seq: 1, Body: "y", Outcome: Acked, At: t0})
	byMember.Delivered(Delivery{Body: "x", Queue: "q1", Offset: 0, Consumer: "c1"})
	byMember.Delivered(Delivery{Body: "x", Queue: "q1", Offset: 0, Consumer: "c2"})
	byMember.Delivered(Delivery{Body: "x", Queue: "q1", Offset: 0, Consumer: "c2"})
	byMember.Delivered(Delivery{Body: "y", Queue: "q2", Offset: 0, Consumer: "c1"})
	byMember.Delivered(Delivery{Body: "y", Queue: "q2", Offset: 0, Consumer: "c1"})
	byMember.InFlightAtFault(7)
	if r := byMember.Check(); r.DupOther != 3 || r.DupElsewhere != 2 || r.InFlight != 7 ||
		!slices.Equal(r.DupQueues, []string{"q1: 2 c1+c2", "q2: 1 c1"}) {
		t.Fatalf("duplicates %d, elsewhere %d, by queue %q, in flight %d", r.DupOther, r.DupElsewhere, r.DupQueues, r.InFlight)
	}
	if got := byMember.DeliveredBeyond(); got["q1"] != 1 || got["q2"] != 1 {
		t.Fatalf("delivered beyond %v", got)
	}
	clean := &History{}
	clean.Sent(Send{Producer: "p", Seq: 0, Body: "a", Outcome: Acked, At: t0})
	clean.Delivered(Delivery{Body: "a", Queue: "q"})
	clean.Replica(Checksum{Group: "g", Replica: "1", ToOffset: 100, SHA256: "aa"})
	clean.Replica(Checksum{Group: "g", Replica: "2", ToOffset: 100, SHA256: "aa"})
	clean.ReadBack("a", "q@0")
	if r := clean.Check(); !r.OK() || !clean.Consumed() || !clean.AllReadBack() {
		t.Fatalf("a clean history failed: %s", r)
	}
}

// A write gap is also reported less the drill's own outages: what the
// restart and the election took, over 1 s.
func TestCheckerGapsLessOutages(t *testing.T) {
	h := &History{}
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for i, s := range []float64{0, 4, 10, 12.5} { // gaps of 4, 6 and 2.5 s
		h.Sent(Send{Producer: "p", Seq: i, Body: fmt.Sprint(i), Outcome: Acked, At: at(s)})
	}
	if r := h.Check(); r.RecoveryGaps != nil || strings.Contains(r.String(), "outages") {
		t.Fatalf("recovery gaps %v without an outage", r.RecoveryGaps)
	}
	h.Outage(at(1), at(2.5))   // 1.5 s of the first gap: 2.5 s left
	h.Outage(at(4.5), at(9.8)) // 5.3 s of the second: 0.7 s left
	r := h.Check()
	if want := []time.Duration{4 * time.Second, 6 * time.Second, 2500 * time.Millisecond}; !slices.Equal(r.WriteGaps, want) {
		t.Fatalf("write gaps %v, want %v", r.WriteGaps, want)
	}
	if want := []time.Duration{2500 * time.Millisecond, 2500 * time.Millisecond}; !slices.Equal(r.RecoveryGaps, want) {
		t.Fatalf("gaps less the outages %v, want %v", r.RecoveryGaps, want)
	}
	if !strings.Contains(r.String(), "less the drill's outages, over 1s: [2.5s 2.5s]") {
		t.Fatalf("report: %s", r)
	}
	if got := h.FirstAckAfter(at(4.5)); !got.Equal(at(10)) {
		t.Fatalf("first ack after 4.5 s: %v", got.Sub(t0))
	}
	if got := h.AcksAround(at(4.5), at(9.8)); got["p"] != [2]time.Duration{500 * time.Millisecond, 200 * time.Millisecond} {
		t.Fatalf("acks around the second outage: %v", got)
	}
}
