package cluster

import (
	"errors"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Heartbeats that would change a member's term or role are kept off
// hashicorp/raft's fast path.
//
// The transport hands a heartbeat (an AppendEntries with no entries, no
// previous entry and no commit index) to Raft's processHeartbeat on the
// connection's goroutine, so that a follower busy writing entries still
// answers its leader in time. processHeartbeat runs appendEntries there,
// and appendEntries, given a newer term, sets the term and makes the
// member a follower, beside the Raft loop rather than in it. A leader's
// loop waiting for work does not see the change until its next turn; if
// that turn is an entry to append, it reads the new term and appends the
// entry in it: a term it never led, at an index where the term's real
// leader appends another entry (hashicorp/raft #695, open in v1.7.3; PR
// #701). Raft then takes the two for the same entry, as they carry the
// same term and index, and each replica applies its own. It was seen here
// as a master thawed after a 2 s freeze that applied a send no other
// replica had (TestDrillMasterPaused, one run in tens; one in a few with
// the freeze repeated). A candidate can likewise count votes won for the
// old term as won for the new one.
//
// heartbeatGate lets a heartbeat through only to a follower of the
// heartbeat's own term, the steady case the fast path is for. Any other
// it answers with an error: the leader logs a failed heartbeat and backs
// off, and its next AppendEntries (sent every CommitTimeout at the
// latest) carries the term to the member's Raft loop, which steps down
// or follows in its own turn. A follower cannot become leader or
// candidate between the check and the handler without first raising its
// term, and appendEntries ignores a heartbeat of a term below its own.
type heartbeatGate struct {
	*memberTransport
	raft atomic.Pointer[raft.Raft] // nil until Raft runs: nothing passes
}

// errHeartbeatOffFastPath is the answer to a heartbeat kept off the fast
// path.
var errHeartbeatOffFastPath = errors.New("cluster: a heartbeat that would change this member's term or role waits for its leader's next AppendEntries")

func newHeartbeatGate(t *memberTransport) *heartbeatGate {
	return &heartbeatGate{memberTransport: t}
}

// SetHeartbeatHandler gives the transport Raft's handler behind the gate.
func (g *heartbeatGate) SetHeartbeatHandler(handle func(raft.RPC)) {
	if handle == nil {
		g.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	g.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		if !g.follows(rpc) {
			rpc.Respond(nil, errHeartbeatOffFastPath)
			return
		}
		handle(rpc)
	})
}

// follows reports whether this member is a follower in the heartbeat's
// term.
func (g *heartbeatGate) follows(rpc raft.RPC) bool {
	r := g.raft.Load()
	req, ok := rpc.Command.(*raft.AppendEntriesRequest)
	return r != nil && ok && r.State() == raft.Follower && r.CurrentTerm() == req.Term
}

// running tells the gate which Raft it guards.
func (g *heartbeatGate) running(r *raft.Raft) { g.raft.Store(r) }

// servers are the group's latest configuration (an atomic read in
// hashicorp/raft); none before Raft runs. The spare followers' pacer,
// which the member's transport holds, ranks only voters by it.
func (g *heartbeatGate) servers() []raft.Server {
	r := g.raft.Load()
	if r == nil {
		return nil
	}
	return r.GetConfiguration().Configuration().Servers
}
