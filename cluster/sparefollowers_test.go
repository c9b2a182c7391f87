package cluster

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// writesOf counts the log writes of member's gate that hold any of the
// indexes from first on.
func writesOf(gate *gateStore, first uint64) int {
	n := 0
	for _, w := range gate.written() {
		if len(w) > 0 && w[len(w)-1] >= first {
			n++
		}
	}
	return n
}

// burstAfterWarming starts a gated group of three with spares paced every
// second, commits 3 entries of 1 KiB and waits for every member to apply
// them (so that no request to the spare is still held), then commits
// count entries of size bytes one at a time through the leader and waits
// for every member to apply them. first is the burst's first index.
func burstAfterWarming(t *testing.T, count, size int) (g *testGroup, gate func(member int) *gateStore, leader int, first uint64) {
	t.Helper()
	g, gate = gatedGroup(t, time.Second)
	leader = g.leader()
	warm := g.apply(leader, "warm", 3)
	g.converge(warm)
	first = lastLogIndex(g.nodes[leader]) + 1
	burst := g.applySized(leader, "burst", count, size)
	g.converge(append(warm, burst...))
	return g, gate, leader, first
}

// The follower a commit waits for gets each entry as it comes; the spare
// gets what came in one request an interval.
func TestSpareFollowerGetsEntriesTogether(t *testing.T) {
	g, gate, leader, first := burstAfterWarming(t, 20, 1024)
	var counts []int
	for i := range g.nodes {
		if i != leader {
			counts = append(counts, writesOf(gate(i), first))
		}
	}
	lo, hi := min(counts[0], counts[1]), max(counts[0], counts[1])
	// Each Apply waited for its commit, so the follower it waited for
	// wrote the entries about one at a time.
	if hi < 10 {
		t.Errorf("the followers wrote the 20 entries in %v writes: neither got them one at a time", counts)
	}
	// The spare: the first at once (its last request was long ago), the
	// rest an interval later, the 20 Applies taking less than that; a few
	// more when a commit took over sparePatience. Every follower at once:
	// 19-20 writes each.
	if lo > 10 {
		t.Errorf("the followers wrote the 20 entries in %v writes: no follower got them together", counts)
	}
}

// Entries of spareLargeEntry bytes go to every follower as they come,
// spares too: both followers write them about one at a time, where
// TestSpareFollowerGetsEntriesTogether's spare writes small ones together.
func TestSpareFollowerGetsLargeEntriesAsTheyCome(t *testing.T) {
	g, gate, leader, first := burstAfterWarming(t, 30, spareLargeEntry)
	for i := range g.nodes {
		if i == leader {
			continue
		}
		// Each Apply waited for its commit. A paced spare writes the 30
		// in a few writes, one at once and then one each time an entry
		// waits sparePatience for the follower ahead: 10 of 20 with
		// go test busy beside it, when this test was written.
		if n := writesOf(gate(i), first); n < 20 {
			t.Errorf("follower %d wrote the 30 large entries in %d writes, want about one each: it was paced as a spare", i+1, n)
		}
	}
}

// When the follower ahead stops answering, the spare gets the entries
// after sparePatience rather than its interval, and the group commits.
func TestSpareTakesOverFromAStalledFollower(t *testing.T) {
	const every = 10 * time.Second
	g, gate := gatedGroup(t, every)
	leader := g.leader()
	// Entries one at a time until a follower lags the leader: the spare,
	// which got the first at once and then waits its interval (or, when a
	// commit took over sparePatience, went again and waits anew). Each
	// Apply returns once a follower holds its entry: the one ahead.
	var last uint64
	ahead, spare := -1, -1
	for k := 0; k < 20 && spare < 0; k++ {
		g.apply(leader, fmt.Sprintf("warm%d", k), 1)
		last = lastLogIndex(g.nodes[leader])
		for i, n := range g.nodes {
			switch {
			case i == leader:
			case lastLogIndex(n) >= last:
				ahead = i
			default:
				spare = i
			}
		}
	}
	if spare < 0 || ahead < 0 {
		t.Fatalf("after 20 entries no follower lags the leader's index %d: every follower got each entry, not one request an interval", last)
	}

	stalled := gate(ahead)
	stalled.shut()
	defer stalled.open()
	began := time.Now()
	if err := g.nodes[leader].Raft.Apply([]byte(entry("held", 0)), 5*time.Second).Error(); err != nil {
		t.Fatalf("apply with the follower ahead stalled: %v", err)
	}
	if took := time.Since(began); took >= every/2 {
		t.Errorf("the commit took %v with the follower ahead stalled: the spare waited its interval (%v)", took, every)
	}
	if got := lastLogIndex(g.nodes[spare]); got <= last {
		t.Errorf("the spare holds index %d, want past %d: the entry committed without it?", got, last)
	}
}

// Who goes at once and who waits, and for how long, from what the
// followers acknowledged.
func TestSpareFollowersHoldUntil(t *testing.T) {
	if s := newSpareFollowers(0, nil, nil); s != nil {
		t.Fatalf("no interval paces followers every %v", s.every)
	}
	s := newSpareFollowers(5*time.Millisecond, func() bool { return true }, noConfiguration)
	now := time.Unix(100, 0)
	s.inTerm(2)
	s.peer("1").acked = 10
	s.peer("2").acked, s.peer("2").lastSent = 8, now.Add(-time.Millisecond)
	expectHolds(t, s, now,
		holdCase{"the follower ahead", "1", 11, time.Time{}},
		holdCase{"the spare, the leader's entries held by the one ahead", "2", 10, now.Add(4 * time.Millisecond)},
		holdCase{"the spare, an entry the one ahead does not hold", "2", 11, now.Add(sparePatience)},
	)
	s.inTerm(3) // a new term's leader knows nothing of its followers yet
	if got := holdUntil(s, "2", 11, now); !got.IsZero() {
		t.Errorf("in a new term the former spare is held until %v", got.Sub(now))
	}
}

// Entries that keep coming while the follower ahead does not acknowledge
// them do not keep a spare waiting: it goes once the first of them has
// waited sparePatience, whatever came since.
func TestSpareGoesWhileEntriesKeepComing(t *testing.T) {
	var leading atomic.Bool
	leading.Store(true)
	s := newSpareFollowers(time.Hour, leading.Load, noConfiguration)
	s.inTerm(2)
	s.peer("1").acked = 10 // ahead on the tie, and never acknowledges more
	s.peer("2").acked, s.peer("2").lastSent = 10, time.Now()
	newest := uint64(10)
	leaderLast := func() uint64 { newest++; return newest } // an entry more at every look
	done := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		s.hold("2", 2, 11, 1024, leaderLast)
		done <- time.Since(start)
	}()
	limit := 50 * sparePatience
	select {
	case took := <-done:
		if took < sparePatience {
			t.Errorf("the spare went after %v, before sparePatience (%v): the follower ahead may still have answered", took, sparePatience)
		}
	case <-time.After(limit):
		leading.Store(false) // ends the hold
		<-done
		t.Errorf("the spare was still held after %v while entries kept coming and the follower ahead held none of them", limit)
	}
}

// A request carrying a large entry goes to a spare at once, and the
// spare's next request waits its interval from then.
func TestSpareGetsLargeEntriesAtOnce(t *testing.T) {
	var leading atomic.Bool
	leading.Store(true)
	s := newSpareFollowers(time.Hour, leading.Load, noConfiguration)
	s.inTerm(2)
	s.peer("1").acked = 10 // ahead on the tie
	s.peer("2").acked, s.peer("2").lastSent = 10, time.Now()
	leaderLast := func() uint64 { return 10 } // the one ahead holds it all
	if got := holdUntil(s, "2", 10, time.Now()); got.Before(time.Now().Add(time.Hour / 2)) {
		t.Fatalf("a small request to the spare is held until %v, want its interval (an hour)", time.Until(got))
	}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		s.hold("2", 2, 11, spareLargeEntry, leaderLast)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		leading.Store(false) // ends the hold
		<-done
		t.Fatalf("a request carrying an entry of %d bytes was held with the spare's interval an hour", spareLargeEntry)
	}
	s.mu.Lock()
	sent := s.peer("2").lastSent
	s.mu.Unlock()
	if sent.Before(start) {
		t.Errorf("the spare's last request is recorded at %v, before the large one went at %v", sent, start)
	}
}

// Only voters count: a voting follower goes at once beside a non-voter
// that acknowledged more (a group of two voters replacing a dead replica
// would otherwise wait an interval for its one voting follower), and a
// caught-up non-voter is a spare.
func TestSpareFollowersCountVotersOnly(t *testing.T) {
	servers := []raft.Server{{ID: "0", Suffrage: raft.Voter}, {ID: "1", Suffrage: raft.Voter}, {ID: "2", Suffrage: raft.Nonvoter}}
	s := newSpareFollowers(5*time.Millisecond, func() bool { return true }, func() []raft.Server { return servers })
	now := time.Unix(100, 0)
	s.inTerm(2)
	s.peer("1").acked, s.peer("1").lastSent = 10, now.Add(-time.Millisecond)
	s.peer("2").acked, s.peer("2").lastSent = 12, now.Add(-time.Millisecond)
	expectHolds(t, s, now,
		holdCase{"the voter, behind the non-voter", "1", 11, time.Time{}},
		holdCase{"the non-voter, an entry the voter does not hold", "2", 13, now.Add(sparePatience)},
	)
	s.peer("1").acked = 13
	expectHolds(t, s, now, holdCase{"the non-voter, the voter holding the entry", "2", 13, now.Add(4 * time.Millisecond)})
	servers = nil // a configuration not known yet: every follower counts
	s.peer("1").acked, s.peer("2").acked = 12, 13
	expectHolds(t, s, now, holdCase{"no configuration known, the follower behind", "1", 13, now.Add(4 * time.Millisecond)})
}

// noConfiguration is a group whose configuration is not known yet: every
// follower counts as a voter.
func noConfiguration() []raft.Server { return nil }

// holdUntil is when s's hold lets id's request go, watching entry watched
// since seen (zero: at once).
func holdUntil(s *spareFollowers, id raft.ServerID, watched uint64, seen time.Time) time.Time {
	acked, spare := s.commitAcked(id, s.servers())
	return s.until(id, acked, spare, watched, seen)
}

// holdCase is a follower's request and when holdUntil should let it go.
type holdCase struct {
	what    string
	id      raft.ServerID
	watched uint64
	want    time.Time
}

func expectHolds(t *testing.T, s *spareFollowers, now time.Time, cases ...holdCase) {
	t.Helper()
	for _, c := range cases {
		if got := holdUntil(s, c.id, c.watched, now); !got.Equal(c.want) {
			t.Errorf("%s: held until %v, want %v", c.what, got.Sub(now), c.want.Sub(now))
		}
	}
}
