package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// pipelinePair is a leader's pipeline to a follower over two real TCP
// transports on loopback; the follower refuses the AppendEntries carrying
// entry refuse (a log that does not match; 0: none) and takes the others.
func pipelinePair(t *testing.T, maxInFlight int, refuse uint64) raft.AppendPipeline {
	t.Helper()
	cfg := func() *raft.NetworkTransportConfig {
		return &raft.NetworkTransportConfig{MaxPool: 2, Timeout: 5 * time.Second, MaxRPCsInFlight: maxInFlight}
	}
	follower, err := raft.NewTCPTransportWithConfig("127.0.0.1:0", nil, cfg())
	if err != nil {
		t.Fatal(err)
	}
	leader, err := raft.NewTCPTransportWithConfig("127.0.0.1:0", nil, cfg())
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		for {
			select {
			case rpc := <-follower.Consumer():
				req := rpc.Command.(*raft.AppendEntriesRequest)
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: req.Entries[0].Index != refuse}, nil)
			case <-stop:
				return
			}
		}
	}()
	p, err := leader.AppendEntriesPipeline("f", follower.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(stop)
		<-answered
		leader.Close()
		follower.Close()
	})
	return p
}

func appendReq(index uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{Term: 1, Entries: []*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: []byte("x")}}}
}

// raft's pipelineReplicate and pipelineDecode, as v1.7.3 runs them: the
// decoder stops at the first failed response, and the sender goes on
// sending until it notices. The sends must all return, and so must the
// pipeline's Close, whatever the order.
func TestAPipelineWhoseDecoderStoppedLetsItsSendsReturn(t *testing.T) {
	p := newSteadyPipeline(pipelinePair(t, 2, 1))
	if _, err := p.AppendEntries(appendReq(1), &raft.AppendEntriesResponse{}); err != nil {
		t.Fatal(err)
	}
	// The decoder: the first response fails, so it stops reading.
	first := <-p.Consumer()
	if first.Response().Success {
		t.Fatal("the follower took the first request")
	}
	sent := make(chan error, 1)
	go func() {
		var err error
		for i := uint64(2); i < 6 && err == nil; i++ {
			_, err = p.AppendEntries(appendReq(i), &raft.AppendEntriesResponse{})
		}
		sent <- err
	}()
	select {
	case err := <-sent:
		if err == nil {
			t.Fatal("every send after the decoder stopped was taken: the pipeline was never closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a send after the decoder stopped never returned: the pipeline wedged")
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close never returned")
	}
}

// The unpatched transport pipeline wedges in the same run: the reason for
// steadyPipeline, and a check that the test above can fail.
func TestTheTransportsOwnPipelineWedgesWhenItsDecoderStops(t *testing.T) {
	p := pipelinePair(t, 2, 1)
	if _, err := p.AppendEntries(appendReq(1), &raft.AppendEntriesResponse{}); err != nil {
		t.Fatal(err)
	}
	if first := <-p.Consumer(); first.Response().Success {
		t.Fatal("the follower took the first request")
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := uint64(2); i < 6; i++ {
			if _, err := p.AppendEntries(appendReq(i), &raft.AppendEntriesResponse{}); err != nil {
				return
			}
		}
	}()
	select {
	case <-sent:
		t.Fatal("the sends returned: hashicorp/raft's pipeline no longer wedges, and steadyPipeline may be dropped")
	case <-time.After(300 * time.Millisecond):
	}
	// What raft would never do once wedged: close it, to free the sender.
	p.Close()
	<-sent
}

// A pipeline whose follower takes every request hands every response on,
// in order, and closes with requests in flight and responses unread.
func TestASteadyPipelineHandsResponsesOnInOrder(t *testing.T) {
	p := newSteadyPipeline(pipelinePair(t, 4, 0))
	const n = 50
	got := make(chan uint64, n)
	go func() {
		for range n {
			f := <-p.Consumer()
			if !f.Response().Success {
				got <- 0
				return
			}
			got <- f.Request().Entries[0].Index
		}
	}()
	for i := uint64(1); i <= n; i++ {
		if _, err := p.AppendEntries(appendReq(i), &raft.AppendEntriesResponse{}); err != nil {
			t.Fatal(err)
		}
	}
	for want := uint64(1); want <= n; want++ {
		if i := <-got; i != want {
			t.Fatalf("response %d: for entry %d (0: a failure)", want, i)
		}
	}
	for i := uint64(n + 1); i <= n+3; i++ { // answered, never read
		if _, err := p.AppendEntries(appendReq(i), &raft.AppendEntriesResponse{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AppendEntries(appendReq(n+4), &raft.AppendEntriesResponse{}); err == nil {
		t.Fatal("a send after Close was taken")
	}
}

// Replication with pipelining on, through a follower stopped while
// entries are in flight to it and started again: every member ends with
// the same entries, and every member shuts down. (It passes without
// steadyPipeline too: a stopped follower's closed connection fails the
// sends at once. The wedge itself is the test above.)
func TestPipelinedReplicationSurvivesAFollowerRestart(t *testing.T) {
	g := newTestGroup(t, 3, 100*time.Millisecond, func(c *RaftConfig) { c.MaxRPCsInFlight = 4 })
	for round := range 3 {
		l := g.leader()
		g.apply(l, fmt.Sprintf("before%d", round), 5)
		f := (l + 1) % 3
		// Entries in flight to f while it stops; their outcomes do not
		// matter, the members must agree on what was committed.
		leader, stop, stopped := g.nodes[l].Raft, make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				leader.Apply([]byte(entry(fmt.Sprintf("r%d", round), k)), 5*time.Second)
			}
		}()
		applied := len(g.fsms[l].list())
		clustertest.WaitFor(t, 10*time.Second, "entries in flight", func() bool {
			return len(g.fsms[l].list()) > applied+50
		})
		g.stop(f)
		close(stop)
		<-stopped
		g.start(f)
		l = g.leader()
		g.apply(l, fmt.Sprintf("after%d", round), 5)
		g.converge(g.fsms[l].list())
	}
}
