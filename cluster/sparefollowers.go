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
// milliseconds instead, a spare syncs a few entries at a time: a lone
// sync sender's p50 0.90x with the rule below, ahead in 8 alternated
// pairs of 8, and no change for 16 sync senders, batched publish or send
// to receive (broker/README.md, 2026-12-06, thirteenth sitting;
// deploy/bench-pairs.sh with RAFTMQ_BENCH_BROKER_FLAGS_B=
// "--raft-spare-followers 5ms" measures it again). Where each replica has
// a disk of its own there is nothing to gain, and a commit that can take
// the faster of two followers is the better hedge, so raftmq broker paces
// spares only for a group on one host (cmd/raftmq/sparefollowers.go).
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
// from then on one of those a commit waits for. Only voters of the
// group's latest configuration count (all followers until it is known): a
// non-voter (a replica being added) never ranks ahead of a voter, since
// in a group of two voters a caught-up non-voter ranked ahead would make
// every commit wait an interval for the one voting follower; a caught-up
// non-voter is a spare. A follower behind the leader's log
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
	servers func() []raft.Server // the latest configuration; nil: every follower votes
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
// go; answered must follow it. leaderLast reads the leader's last index.
// A spare held for its interval goes as soon as an entry that came
// meanwhile waits sparePatience for those ahead of it, so it looks again
// at least that often. It watches one entry at a time, the oldest those
// ahead may lack, and moves to the newest only once they hold it: entries
// that keep coming (batched senders) do not keep moving its deadline.
func (s *spareFollowers) hold(id raft.ServerID, term, last uint64, leaderLast func() uint64) {
	watched, seen := leaderLast(), time.Now() // the entry watched, and when first seen
	if last < watched {
		return // behind the leader: catching up
	}
	newest, newestSeen := watched, seen
	for {
		if !s.leading() {
			return // stepped down or shut down: Raft stops this replicator
		}
		s.mu.Lock()
		s.inTerm(term)
		now := time.Now()
		if newest > watched && s.aheadHold(id, watched) {
			watched, seen = newest, newestSeen
		}
		until := s.holdUntil(id, watched, seen)
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
			newest, newestSeen = l, time.Now()
		}
	}
}

// holdUntil is when id's request may go, watched the entry its hold
// watches, first seen at seen: zero, at once. Called locked.
func (s *spareFollowers) holdUntil(id raft.ServerID, watched uint64, seen time.Time) time.Time {
	voters := s.voters()
	ahead, holding := s.ahead(id, watched, voters)
	need := s.need(voters)
	switch {
	case ahead < need:
		return time.Time{} // one a commit waits for
	case holding >= need:
		return s.peer(id).lastSent.Add(s.every) // a spare: entries every interval
	default:
		return seen.Add(sparePatience) // those ahead do not hold watched yet
	}
}

// aheadHold says whether enough of the followers ahead of id hold index
// for a commit. Called locked.
func (s *spareFollowers) aheadHold(id raft.ServerID, index uint64) bool {
	voters := s.voters()
	_, holding := s.ahead(id, index, voters)
	return holding >= s.need(voters)
}

// ahead counts the voting followers ahead of id, those that acknowledged
// more (of two that acknowledged as much, the lower id; every voter is
// ahead of a non-voter), and of them those that hold index. voters is
// s.voters(). Called locked.
func (s *spareFollowers) ahead(id raft.ServerID, index uint64, voters map[raft.ServerID]bool) (ahead, holding int) {
	me, iVote := s.peer(id), voters == nil || voters[id]
	for other, p := range s.peers {
		if other == id || (voters != nil && !voters[other]) {
			continue
		}
		if iVote && !(p.acked > me.acked || (p.acked == me.acked && other < id)) {
			continue
		}
		ahead++
		if p.acked >= index {
			holding++
		}
	}
	return ahead, holding
}

// need is how many followers a commit waits for besides the leader, of
// the voting followers known this term: a majority's worth. voters is
// s.voters(). Called locked.
func (s *spareFollowers) need(voters map[raft.ServerID]bool) int {
	n := 0
	for id := range s.peers {
		if voters == nil || voters[id] {
			n++
		}
	}
	return (n + 1) / 2
}

// voters are the servers with a vote in the group's latest configuration;
// nil, every follower counted as one, while that is not known. Called
// locked.
func (s *spareFollowers) voters() map[raft.ServerID]bool {
	if s.servers == nil {
		return nil
	}
	servers := s.servers()
	if len(servers) == 0 {
		return nil
	}
	out := make(map[raft.ServerID]bool, len(servers))
	for _, srv := range servers {
		if srv.Suffrage == raft.Voter {
			out[srv.ID] = true
		}
	}
	return out
}

// knowServers gives the pacer the group's latest configuration, so that
// it tells voters from non-voters (the member's Raft starts after its
// transport, which holds the pacer). A nil pacer (spares off) ignores it.
func (s *spareFollowers) knowServers(servers func() []raft.Server) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.servers = servers
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
