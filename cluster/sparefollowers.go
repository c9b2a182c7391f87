package cluster

import (
	"math"
	"slices"
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
// held, nor are requests carrying an entry of spareLargeEntry bytes or
// more: an entry that large holds many messages (a batched send, or an
// entry of many synchronous sends), and there a commit that takes the
// faster of two followers paid more than pacing saved (pacing off against
// on, 4 alternated pairs: batched publish 1.055x, ahead in all 4; 16 sync
// senders' p99 0.867x; broker/README.md, 2026-12-06, seventeenth sitting.
// This rule against pacing entries of every size, on a noisier VM, 12
// pairs: batched publish 1.019x and 1.029x in two sets, ahead in 7; its
// p99 0.935x in the set of 8; eighteenth sitting). A lone sender's
// entries, of one message each, are what pacing is for. The size is an
// entry's, not the request's: a paced spare's request gathers the small
// entries of an interval (a lone sender makes several), and those are to
// stay paced.

// sparePatience is how long a spare waits for the followers ahead of it to
// acknowledge what its request carries before it goes itself: a few
// AppendEntries round trips with a sync on this project's machines
// (broker/README.md: 0.4-1.1 ms under load).
const sparePatience = 2 * time.Millisecond

// spareLargeEntry is the size of an entry that makes its request go to a
// spare at once: 8 KiB, above a lone 1 KiB send's entry and below an
// entry of 16 such sends (17 KiB) or of one batched send (64 messages).
const spareLargeEntry = 8 << 10

// spareFollowers paces the leader's AppendEntries that carry entries.
type spareFollowers struct {
	every   time.Duration        // RaftConfig.SpareFollowerInterval
	leading func() bool          // whether this member still leads: a hold ends when not
	servers func() []raft.Server // the group's latest configuration; none: every follower votes

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

func newSpareFollowers(every time.Duration, leading func() bool, servers func() []raft.Server) *spareFollowers {
	if every <= 0 {
		return nil
	}
	return &spareFollowers{every: every, leading: leading, servers: servers, peers: map[raft.ServerID]*followerProgress{}, changed: make(chan struct{})}
}

// hold returns when id's request in term carrying entries up to last, the
// largest of them of largest bytes, may go; answered must follow it.
// leaderLast reads the leader's last index.
// A spare held for its interval goes as soon as an entry that came
// meanwhile waits sparePatience for those ahead of it, so it looks again
// at least that often. It watches one entry at a time, the oldest those
// ahead may lack, and moves to the newest only once they hold it: entries
// that keep coming (batched senders) do not keep moving its deadline.
func (s *spareFollowers) hold(id raft.ServerID, term, last uint64, largest int, leaderLast func() uint64) {
	if largest >= spareLargeEntry {
		s.sent(id, term)
		return
	}
	watched, seen := leaderLast(), time.Now() // the entry watched, and when first seen
	if last < watched {
		return // behind the leader: catching up
	}
	newest, newestSeen := watched, seen
	servers := s.servers() // once a request: a hold lasts an interval at most
	for {
		if !s.leading() {
			return // stepped down or shut down: Raft stops this replicator
		}
		s.mu.Lock()
		s.inTerm(term)
		now := time.Now()
		acked, spare := s.commitAcked(id, servers)
		if spare && acked >= watched {
			watched, seen = newest, newestSeen // those ahead hold it: watch the newest
		}
		until := s.until(id, acked, spare, watched, seen)
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

// until is when id's request may go, acked and spare what commitAcked
// says of it, watched the entry its hold watches, first seen at seen:
// zero, at once. Called locked.
func (s *spareFollowers) until(id raft.ServerID, acked uint64, spare bool, watched uint64, seen time.Time) time.Time {
	switch {
	case !spare:
		return time.Time{} // one a commit waits for
	case acked >= watched:
		return s.peer(id).lastSent.Add(s.every) // a spare: entries every interval
	default:
		return seen.Add(sparePatience) // those ahead do not hold watched yet
	}
}

// commitAcked ranks id among the voting followers this term (by what each
// acknowledged; of two that acknowledged as much, the lower id; every
// voter ahead of a non-voter), voters those of servers, the group's latest
// configuration. A commit waits, besides the leader, for a majority's
// worth of them: when that many are ahead of id, id is a spare, and acked
// is the highest index that many of those ahead hold. Called locked.
func (s *spareFollowers) commitAcked(id raft.ServerID, servers []raft.Server) (acked uint64, spare bool) {
	me, known, idVotes := s.peer(id), 0, votes(servers, id)
	var buf [8]uint64
	ahead := buf[:0] // what each voting follower ahead of id acknowledged
	for other, p := range s.peers {
		if !votes(servers, other) {
			continue
		}
		known++
		if other != id && (!idVotes || p.acked > me.acked || (p.acked == me.acked && other < id)) {
			ahead = append(ahead, p.acked)
		}
	}
	need := (known + 1) / 2
	switch {
	case len(ahead) < need:
		return 0, false
	case need == 0:
		return math.MaxUint64, true // no voting follower known: a commit waits for none
	}
	slices.Sort(ahead)
	return ahead[len(ahead)-need], true
}

// votes says whether id has a vote in servers, the group's latest
// configuration; while that is not known (none), every follower counts as
// a voter.
func votes(servers []raft.Server, id raft.ServerID) bool {
	if len(servers) == 0 {
		return true
	}
	for _, srv := range servers {
		if srv.ID == id {
			return srv.Suffrage == raft.Voter
		}
	}
	return false
}

// sent records that id's request in term went at once, so that a spare's
// next request waits its interval from now.
func (s *spareFollowers) sent(id raft.ServerID, term uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inTerm(term)
	s.peer(id).lastSent = time.Now()
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
