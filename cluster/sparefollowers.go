package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// With RaftConfig.SpareFollowerInterval set, the leader sends new entries
// at once only to the followers a commit waits for; the rest, the spares,
// get what came since their last AppendEntries every interval, in one
// request.
//
// hashicorp/raft hands every new entry to every follower's replicator at
// once. A commit needs the leader's copy and enough followers' for a
// majority (one of two in a group of three); the other follower's write
// and fsync are for later. Where the replicas share a disk (a
// docker-compose cluster on one host, deploy/bench-local.sh) that third
// fsync of each entry queues on the device with the two the commit waits
// for, and on two vCPUs its thread wake-ups with theirs. Sent every few
// milliseconds instead, a spare syncs a few entries at a time. It is off
// by default: alternated pairs against every follower at once disagreed
// (broker/README.md, 2026-12-06, twelfth sitting; deploy/bench-pairs.sh
// with RAFTMQ_BENCH_BROKER_FLAGS_B="--raft-spare-followers 5ms" measures
// it again).
//
// Which followers are spares is decided per request, from what each
// follower acknowledged in the leader's term: a follower goes at once
// unless enough others (a majority's worth of followers, counted over the
// followers this leader has sent to, a non-voter being caught up among
// them) acknowledged more than it. While the leader holds an entry that
// those ahead of a spare have not acknowledged, the spare waits at most
// sparePatience from when it saw that entry, then goes: when the follower
// a commit waited for stops answering, the next commit waits
// sparePatience more, once, and the spare, having acknowledged more, is
// from then on one of those a commit waits for. A follower behind the
// leader's log
// (catching up, or one request of many) goes at once. Raft's safety does
// not depend on when a follower receives entries: the leader still counts
// an entry committed only on a majority of disks.
//
// Requests without entries (the commit index alone, heartbeats) are never
// held.

// sparePatience is how long a spare waits for the followers ahead of it to
// acknowledge what its request carries before it goes itself: a few
// AppendEntries round trips with a sync on this project's machines
// (broker/README.md: 0.4-1.1 ms under load).
const sparePatience = 2 * time.Millisecond

// spareFollowers paces the leader's AppendEntries that carry entries.
type spareFollowers struct {
	every   time.Duration // RaftConfig.SpareFollowerInterval
	leading func() bool   // whether this member still leads: a hold ends when not

	mu      sync.Mutex
	term    uint64
	peers   map[raft.ServerID]*followerProgress // this term's
	changed chan struct{}                       // closed when a request ends
}

// followerProgress is what the leader knows of one follower this term.
type followerProgress struct {
	acked    uint64    // the last index it acknowledged holding
	lastSent time.Time // when its last request with entries went
}

func newSpareFollowers(every time.Duration, leading func() bool) *spareFollowers {
	if every <= 0 {
		return nil
	}
	return &spareFollowers{every: every, leading: leading, peers: map[raft.ServerID]*followerProgress{}, changed: make(chan struct{})}
}

// hold returns when id's request in term carrying entries up to last may
// go; answered must follow it. leaderLast reads the leader's last index:
// a spare held for its interval goes as soon as those ahead of it fail to
// hold an entry that came meanwhile within sparePatience, so it looks
// again at least that often.
func (s *spareFollowers) hold(id raft.ServerID, term, last uint64, leaderLast func() uint64) {
	newest, seen := leaderLast(), time.Now() // the leader's last index, and when first seen
	if last < newest {
		return // behind the leader: catching up
	}
	for {
		if !s.leading() {
			return // stepped down or shut down: Raft stops this replicator
		}
		s.mu.Lock()
		s.inTerm(term)
		now := time.Now()
		until := s.holdUntil(id, newest, seen)
		if !until.After(now) {
			s.peer(id).lastSent = now
			s.mu.Unlock()
			return
		}
		changed := s.changed
		s.mu.Unlock()
		t := time.NewTimer(min(until.Sub(now), sparePatience))
		select {
		case <-changed:
		case <-t.C:
		}
		t.Stop()
		if l := leaderLast(); l > newest {
			newest, seen = l, time.Now()
		}
	}
}

// holdUntil is when id's request may go, newest the leader's last index,
// first seen at seen: zero, at once. Called locked.
func (s *spareFollowers) holdUntil(id raft.ServerID, newest uint64, seen time.Time) time.Time {
	me := s.peer(id)
	ahead, aheadHold := 0, 0 // followers that acknowledged more; of them, those holding newest
	for other, p := range s.peers {
		if other == id || !(p.acked > me.acked || (p.acked == me.acked && other < id)) {
			continue
		}
		ahead++
		if p.acked >= newest {
			aheadHold++
		}
	}
	// A majority's worth of followers: the followers a commit waits for,
	// besides the leader, of len(s.peers) known.
	need := (len(s.peers) + 1) / 2
	switch {
	case ahead < need:
		return time.Time{} // one a commit waits for
	case aheadHold >= need:
		return me.lastSent.Add(s.every) // a spare: entries every interval
	default:
		return seen.Add(sparePatience) // those ahead do not hold newest yet
	}
}

// answered records the end of id's request carrying entries up to last.
func (s *spareFollowers) answered(id raft.ServerID, term, last uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if term == s.term {
		if p := s.peer(id); ok && last > p.acked {
			p.acked = last
		}
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// inTerm forgets what it knew of an earlier term's followers. Called
// locked.
func (s *spareFollowers) inTerm(term uint64) {
	if term != s.term {
		s.term = term
		clear(s.peers)
	}
}

// peer is id's progress, added when new. Called locked.
func (s *spareFollowers) peer(id raft.ServerID) *followerProgress {
	p := s.peers[id]
	if p == nil {
		p = &followerProgress{}
		s.peers[id] = p
	}
	return p
}
