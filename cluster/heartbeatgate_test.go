package cluster

import (
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// heartbeat sends the member at addr a heartbeat as a leader named from
// of term term sends one: an AppendEntries with no entries, no previous
// entry and no commit index, which hashicorp/raft's transport hands to
// its fast path. It goes over a real TCP transport.
func heartbeat(t *testing.T, addr, from string, term uint64) (raft.AppendEntriesResponse, error) {
	t.Helper()
	tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		tr.CloseStreams() // ends the member's handler of this connection
		tr.Close()
	}()
	var resp raft.AppendEntriesResponse
	err = tr.AppendEntries(raft.ServerID(from), raft.ServerAddress(addr), &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(from), Addr: []byte(tr.LocalAddr())},
		Term:      term,
	}, &resp)
	return resp, err
}

// hashicorp/raft #695: a heartbeat carrying a newer term, handled on the
// transport's goroutine, makes a leader a follower of that term while the
// leader's loop, waiting for work, goes on; the next entry it is given it
// appends at the newer term, a term it never led, at an index where that
// term's real leader appends another entry. Both carry the same term, so
// Raft takes them for the same entry, and the two replicas apply
// different things there (TestDrillMasterPaused: a master thawed after 2
// s applied a send the others did not have). The member here leads alone;
// a heartbeat of the next term must not reach its Raft, and its next
// entry is appended in the term it leads.
func TestAHeartbeatOfANewerTermDoesNotTurnALeadersEntriesToThatTerm(t *testing.T) {
	g := newTestGroup(t, 1, 50*time.Millisecond, nil)
	n := g.nodes[g.leader()]
	term := n.Raft.CurrentTerm()
	if _, err := heartbeat(t, g.cfgs[0].BindAddr, "elsewhere", term+1); err == nil {
		t.Error("a heartbeat of a newer term was answered on the fast path")
	}
	if got := n.Raft.CurrentTerm(); got != term {
		t.Errorf("term %d after the heartbeat, want %d", got, term)
	}
	before := lastLogIndex(n)
	applied := n.Raft.Apply([]byte("x"), time.Second).Error()
	for i := before + 1; i <= lastLogIndex(n); i++ {
		var l raft.Log
		if err := n.log.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == raft.LogCommand && l.Term != term {
			t.Fatalf("entry %d appended in term %d; this member leads term %d and led no other", l.Index, l.Term, term)
		}
	}
	if applied != nil {
		t.Fatalf("apply on the leader: %v", applied)
	}
}

// The fast path stays for what it is for: a follower answers its leader's
// heartbeats of the term it follows without waiting for its Raft loop,
// which may be writing entries to disk; one of a newer term it leaves to
// that loop (the leader's next AppendEntries brings the term there).
func TestAFollowerAnswersHeartbeatsOfItsTermOnly(t *testing.T) {
	g := newTestGroup(t, 3, 50*time.Millisecond, nil)
	var f int
	clustertest.WaitFor(t, 10*time.Second, "a follower answering its leader's heartbeat", func() bool {
		// Read again each round: an election on a loaded machine moves
		// the leader and the term.
		l := g.leader()
		f = (l + 1) % 3
		resp, err := heartbeat(t, g.cfgs[f].BindAddr, g.cfgs[l].ID, g.nodes[l].Raft.CurrentTerm())
		return err == nil && resp.Success
	})
	newer := g.nodes[f].Raft.CurrentTerm() + 100 // newer than any election here reaches
	if _, err := heartbeat(t, g.cfgs[f].BindAddr, "elsewhere", newer); err == nil {
		t.Fatal("a follower answered a heartbeat of a newer term on the fast path")
	}
	if got := g.nodes[f].Raft.CurrentTerm(); got >= newer {
		t.Fatalf("the follower took term %d from a heartbeat", got)
	}
}
