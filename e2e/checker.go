// Package e2e holds the tests across real processes and containers:
// failover drills under load, judged by a history checker.
//
// Files:
//   - checker.go: the history (sends, deliveries, what is read back after
//     a drill, replica checksums) and its verdict.
//   - drill_test.go: the load every drill runs (orderly and round-robin
//     producers, two push consumers) and the read-back after it.
//   - proc_test.go: raftmq processes on 127.0.0.1 and the kill, stop and
//     pause drills on them.
//   - netns_test.go: brokers in network namespaces, to cut one off.
//   - membership_test.go: a dead replica replaced through the CLI under load.
//   - powerloss_test.go: brokers whose data dirs are lazyfs mounts that lose
//     what was not fsynced at a power cut, and the power-loss drills.
//   - docker_test.go: the compose cluster's drills (RAFTMQ_E2E_DOCKER=1).
//   - secure_test.go: the CLI against a cluster with TLS and access control.
//   - consumerkill_test.go: push consumers as child processes of the test
//     binary, killed (kill -9) while their group rebalances.
//   - linkproxy_test.go: a TCP proxy in front of each replica's Raft port
//     that makes its links slow or lossy, and the drill through it.
//   - transactions_test.go: transactions through a master kill, their
//     open halves checked back with a second producer instance.
//
// lazyfs (its own package) is the power-loss filesystem.
package e2e

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Outcome is what a producer learned of one send.
type Outcome int

const (
	Acked   Outcome = iota // stored: it must be consumed
	Failed                 // refused: it must not be (nothing was stored)
	Unknown                // timed out or leadership lost: it may be
)

// Send is one send as its producer recorded it.
type Send struct {
	Producer string
	Seq      int
	Body     string
	Outcome  Outcome
	MsgID    string
	Queue    string // group/queue id
	Offset   int64
	At       time.Time
	Err      string // why an Unknown or Failed send failed
}

// Delivery is one message as a consumer received it.
type Delivery struct {
	Body     string
	Queue    string
	Offset   int64
	Consumer string // the member of the group it was delivered to
}

// Checksum is one replica's commitlog hash after quiescence.
type Checksum struct {
	Group    string
	Replica  string
	ToOffset int64 // the hash covers the commitlog up to here
	SHA256   string
}

// History collects sends, deliveries and replica checksums from any
// goroutine.
type History struct {
	mu         sync.Mutex
	sends      []Send
	deliveries []Delivery
	checksums  []Checksum
	// readBack holds what a consumer group of the checker's own read from
	// the topic's first offset once the drill was over, by body, with where
	// each copy is stored; nil until then.
	readBack map[string]map[string]bool
	// inFlight is the consumers' in-flight window when the fault began:
	// messages delivered but not yet covered by the group's committed
	// offset, summed over the queues (inFlightTaken: it was taken).
	inFlight      int
	inFlightTaken bool
	// outages are spans in which the drill itself kept a quorum of the
	// group's replicas powered off (Outage).
	outages [][2]time.Time
}

// Outage records a span in which the drill kept a quorum of the group's
// replicas off (a power cut of all of them, before it starts them again):
// no system acknowledges a write then, so the report also gives each
// write gap less its overlap with these spans, what the restart and the
// election took.
func (h *History) Outage(from, to time.Time) {
	h.mu.Lock()
	h.outages = append(h.outages, [2]time.Time{from, to})
	h.mu.Unlock()
}

// FirstAckAfter is the first acknowledgement of a send at or after t,
// zero if none yet.
func (h *History) FirstAckAfter(t time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var first time.Time
	for _, s := range h.sends {
		if s.Outcome == Acked && !s.At.Before(t) && (first.IsZero() || s.At.Before(first)) {
			first = s.At
		}
	}
	return first
}

// AcksOn counts the acknowledgements of sends stored on group's queues
// between from and to.
func (h *History) AcksOn(group string, from, to time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.sends {
		if s.Outcome == Acked && strings.HasPrefix(s.Queue, group+"/") && !s.At.Before(from) && !s.At.After(to) {
			n++
		}
	}
	return n
}

// AcksAround says, per producer, how long before cut its last
// acknowledgement came and how long after restart its first one did
// (negative: none yet).
func (h *History) AcksAround(cut, restart time.Time) map[string][2]time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	last, first := map[string]time.Time{}, map[string]time.Time{}
	for _, s := range h.sends {
		if s.Outcome != Acked {
			continue
		}
		if s.At.Before(cut) && s.At.After(last[s.Producer]) {
			last[s.Producer] = s.At
		}
		if !s.At.Before(restart) && (first[s.Producer].IsZero() || s.At.Before(first[s.Producer])) {
			first[s.Producer] = s.At
		}
	}
	out := map[string][2]time.Duration{}
	for p, l := range last {
		f := time.Duration(-1)
		if !first[p].IsZero() {
			f = first[p].Sub(restart).Round(time.Millisecond)
		}
		out[p] = [2]time.Duration{cut.Sub(l).Round(time.Millisecond), f}
	}
	return out
}

// InFlightAtFault records the consumers' in-flight window as the fault
// begins: what a master change may deliver again.
func (h *History) InFlightAtFault(n int) {
	h.mu.Lock()
	h.inFlight, h.inFlightTaken = n, true
	h.mu.Unlock()
}

// DeliveredBeyond returns, per queue, the offset after the highest one
// delivered so far.
func (h *History) DeliveredBeyond() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int64{}
	for _, d := range h.deliveries {
		out[d.Queue] = max(out[d.Queue], d.Offset+1)
	}
	return out
}

// Replica records a replica's commitlog checksum, taken once the drill's
// load has stopped and the group has quiesced.
func (h *History) Replica(c Checksum) {
	h.mu.Lock()
	h.checksums = append(h.checksums, c)
	h.mu.Unlock()
}

func (h *History) Sent(s Send) {
	h.mu.Lock()
	h.sends = append(h.sends, s)
	h.mu.Unlock()
}

func (h *History) Delivered(d Delivery) {
	h.mu.Lock()
	h.deliveries = append(h.deliveries, d)
	h.mu.Unlock()
}

// ReadBack records a message read again after the drill, by a consumer
// group that starts from the first offset: what the store holds, and where
// (its queue and offset: a message stored twice is read back from two
// places).
func (h *History) ReadBack(body, at string) {
	h.mu.Lock()
	if h.readBack == nil {
		h.readBack = map[string]map[string]bool{}
	}
	if h.readBack[body] == nil {
		h.readBack[body] = map[string]bool{}
	}
	h.readBack[body][at] = true
	h.mu.Unlock()
}

// AllReadBack reports whether every acknowledged send was read back.
func (h *History) AllReadBack() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.sends {
		if h.unreadLocked(s) {
			return false
		}
	}
	return true
}

// unreadLocked reports whether s was acknowledged and the read-back has
// not found it (or none was made).
func (h *History) unreadLocked(s Send) bool { return s.Outcome == Acked && h.readBack[s.Body] == nil }

// NotStoredByQueue counts, per queue the send was acknowledged on, the
// acknowledged sends the read-back did not find: one queue unread, or
// messages missing everywhere.
func (h *History) NotStoredByQueue() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, s := range h.sends {
		if h.readBack != nil && h.unreadLocked(s) {
			out[s.Queue]++
		}
	}
	return out
}

// Consumed reports whether every acknowledged send was delivered.
func (h *History) Consumed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	for _, d := range h.deliveries {
		seen[d.Body] = true
	}
	for _, s := range h.sends {
		if s.Outcome == Acked && !seen[s.Body] {
			return false
		}
	}
	return true
}

// Report is the checker's verdict.
type Report struct {
	Acked, Failed, Unknown int
	Lost                   []string // acked, never consumed
	NotStored              []string // acked, and not read back after the drill (when it was read back)
	StoredTwice            int      // sent messages read back from more than one place: a producer's retry stored again
	Unexpected             []string // consumed, never sent (or sent and refused)
	DupFromUnknown         int      // deliveries beyond the first of messages whose send outcome was unknown
	DupOther               int      // deliveries beyond the first of other messages
	// DupElsewhere counts the DupOther deliveries made to another member
	// than the message's first; DupQueues names the queues with the most
	// duplicates and the members they went to ("broker-a/2: 812 c1+c2").
	DupElsewhere int
	DupQueues    []string
	InFlight     int // the in-flight window at the fault (-1: not taken)
	// SendErrors names the commonest errors of sends that were not acked,
	// with their counts ("412× rpc error: ...").
	SendErrors  []string
	OrderBreaks []string // a producer's messages stored out of send order within a queue
	Divergent   []string // groups whose replicas' commitlogs differ
	Replicas    int      // replica checksums compared
	WriteGaps   []time.Duration
	// RecoveryGaps are the write gaps less the drill's own outages
	// (History.Outage) that are still over 1 s; nil when the drill
	// recorded none.
	RecoveryGaps []time.Duration
}

func (r Report) String() string {
	gaps := make([]string, len(r.WriteGaps))
	for i, g := range r.WriteGaps {
		gaps[i] = g.Round(time.Millisecond).String()
	}
	dups := ""
	if r.DupOther > 0 {
		dups = fmt.Sprintf(": %d to another member, by queue [%s]", r.DupElsewhere, strings.Join(r.DupQueues, "; "))
	}
	errs := ""
	if len(r.SendErrors) > 0 {
		errs = " [" + strings.Join(r.SendErrors, "; ") + "]"
	}
	return fmt.Sprintf("acked %d, failed %d, unknown %d%s; lost %d, not stored %d, stored twice %d, unexpected %d, duplicates %d%s (+%d from unknown sends; in flight at the fault %d), order breaks %d, divergent groups %d (of %d replicas compared); write gaps over 1s: [%s]",
		r.Acked, r.Failed, r.Unknown, errs, len(r.Lost), len(r.NotStored), r.StoredTwice, len(r.Unexpected), r.DupOther, dups, r.DupFromUnknown, r.InFlight,
		len(r.OrderBreaks), len(r.Divergent), r.Replicas, strings.Join(gaps, " ")) + r.recoveryGaps()
}

func (r Report) recoveryGaps() string {
	if r.RecoveryGaps == nil {
		return ""
	}
	gaps := make([]string, len(r.RecoveryGaps))
	for i, g := range r.RecoveryGaps {
		gaps[i] = g.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("; less the drill's outages, over 1s: [%s]", strings.Join(gaps, " "))
}

// OK is the drills' pass: nothing lost or missing from the store, nothing unexpected, no order
// break, no replicas differing.
func (r Report) OK() bool {
	return len(r.Lost) == 0 && len(r.NotStored) == 0 && len(r.Unexpected) == 0 && len(r.OrderBreaks) == 0 && len(r.Divergent) == 0
}

// Check judges the history.
func (h *History) Check() Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	var r Report
	outcome := map[string]Outcome{}
	sendErrs := map[string]int{}
	for _, s := range h.sends {
		outcome[s.Body] = s.Outcome
		if s.Err != "" {
			sendErrs[s.Err]++
		}
		switch s.Outcome {
		case Acked:
			r.Acked++
		case Failed:
			r.Failed++
		default:
			r.Unknown++
		}
	}
	r.SendErrors = commonest(sendErrs, 3, func(e string, n int) string { return fmt.Sprintf("%d× %s", n, e) })
	r.InFlight = -1
	if h.inFlightTaken {
		r.InFlight = h.inFlight
	}
	count := map[string]int{}
	firstTo := map[string]string{} // body -> the member it was first delivered to
	type dupQueue struct {
		n       int
		members map[string]bool
	}
	byQueue := map[string]*dupQueue{}
	for _, d := range h.deliveries {
		count[d.Body]++
		if o, ok := outcome[d.Body]; !ok || o == Failed {
			if count[d.Body] == 1 {
				r.Unexpected = append(r.Unexpected, d.Body)
			}
		}
		if count[d.Body] == 1 {
			firstTo[d.Body] = d.Consumer
			continue
		}
		if outcome[d.Body] == Unknown {
			r.DupFromUnknown++
			continue
		}
		r.DupOther++
		if d.Consumer != firstTo[d.Body] {
			r.DupElsewhere++
		}
		q := byQueue[d.Queue]
		if q == nil {
			q = &dupQueue{members: map[string]bool{}}
			byQueue[d.Queue] = q
		}
		q.n++
		q.members[firstTo[d.Body]], q.members[d.Consumer] = true, true
	}
	dupCounts := map[string]int{}
	for name, q := range byQueue {
		dupCounts[name] = q.n
	}
	r.DupQueues = commonest(dupCounts, 4, func(name string, n int) string {
		return fmt.Sprintf("%s: %d %s", name, n, strings.Join(slices.Sorted(maps.Keys(byQueue[name].members)), "+"))
	})
	for _, s := range h.sends {
		if s.Outcome == Acked && count[s.Body] == 0 {
			r.Lost = append(r.Lost, s.Body)
		}
		if h.readBack != nil && h.unreadLocked(s) {
			r.NotStored = append(r.NotStored, s.Body)
		}
		if len(h.readBack[s.Body]) > 1 {
			r.StoredTwice++
		}
	}
	// Order: within a queue, a producer's messages must be stored in the
	// order it sent them (its sends are sequential).
	seq := map[string]Send{}
	for _, s := range h.sends {
		seq[s.Body] = s
	}
	type key struct{ producer, queue string }
	stored := map[key][]Delivery{}
	for _, d := range h.deliveries {
		if s, ok := seq[d.Body]; ok {
			stored[key{s.Producer, d.Queue}] = append(stored[key{s.Producer, d.Queue}], d)
		}
	}
	for k, ds := range stored {
		sort.Slice(ds, func(i, j int) bool { return ds[i].Offset < ds[j].Offset })
		ds = slices.CompactFunc(ds, func(a, b Delivery) bool { return a.Offset == b.Offset }) // redeliveries
		last := -1
		for _, d := range ds {
			n := seq[d.Body].Seq
			if n < last {
				r.OrderBreaks = append(r.OrderBreaks, fmt.Sprintf("%s in %s: seq %d stored after %d", k.producer, k.queue, n, last))
			}
			last = max(last, n)
		}
	}
	// Divergence: within a group, every replica's hash must cover the same
	// range and agree.
	first := map[string]Checksum{}
	for _, c := range h.checksums {
		r.Replicas++
		f, ok := first[c.Group]
		if !ok {
			first[c.Group] = c
			continue
		}
		if c.ToOffset != f.ToOffset || c.SHA256 != f.SHA256 {
			r.Divergent = append(r.Divergent, fmt.Sprintf("%s: replica %s has %.12s to offset %d, replica %s %.12s to offset %d",
				c.Group, c.Replica, c.SHA256, c.ToOffset, f.Replica, f.SHA256, f.ToOffset))
		}
	}
	// Write gaps: per producer, the longest pauses between acks.
	byProducer := map[string][]time.Time{}
	for _, s := range h.sends {
		if s.Outcome == Acked {
			byProducer[s.Producer] = append(byProducer[s.Producer], s.At)
		}
	}
	for _, ts := range byProducer {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		for i := 1; i < len(ts); i++ {
			if g := ts[i].Sub(ts[i-1]); g > time.Second {
				r.WriteGaps = append(r.WriteGaps, g)
				if g -= overlap(ts[i-1], ts[i], h.outages); len(h.outages) > 0 && g > time.Second {
					r.RecoveryGaps = append(r.RecoveryGaps, g)
				}
			}
		}
	}
	if len(h.outages) > 0 && r.RecoveryGaps == nil {
		r.RecoveryGaps = []time.Duration{}
	}
	return r
}

// overlap is how much of [from, to] the spans cover (they do not overlap
// each other).
func overlap(from, to time.Time, spans [][2]time.Time) time.Duration {
	var d time.Duration
	for _, s := range spans {
		if b, e := maxTime(from, s[0]), minTime(to, s[1]); e.After(b) {
			d += e.Sub(b)
		}
	}
	return d
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// commonest formats the n keys of counts with the highest counts (ties by
// key), highest first.
func commonest(counts map[string]int, n int, format func(key string, count int) string) []string {
	keys := slices.Sorted(maps.Keys(counts))
	slices.SortStableFunc(keys, func(a, b string) int { return counts[b] - counts[a] })
	var out []string
	for _, k := range keys[:min(len(keys), n)] {
		out = append(out, format(k, counts[k]))
	}
	return out
}
