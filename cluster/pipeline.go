package cluster

import (
	"sync"

	"github.com/hashicorp/raft"
)

// steadyPipeline is one of hashicorp/raft's pipelined AppendEntries
// streams to a follower, made unable to wedge.
//
// The wedge (raft v1.7.3, replication.go and net_transport.go): the
// leader's pipelineDecode stops reading the pipeline's responses at the
// first one that fails (Success false, an error, or a newer term), and
// only then does the send loop notice and close the pipeline. A send in
// between writes its request and waits for the transport's decoder to
// take it; the decoder waits to hand over the previous response, which
// nobody reads any more. The send loop never closes the pipeline, that
// follower gets no more entries (its heartbeats go on, so no election
// heals it), and the leader's shutdown waits for ever. It was seen here as
// a 10-minute hang in a broker test's Close, with a follower killed under
// load; grafana/pyroscope #5518 describes the same hang.
//
// steadyPipeline hands the transport's responses on itself, and after
// handing on one that ends pipelineDecode it closes the transport's
// pipeline: a send waiting in it returns ErrPipelineShutdown, the send
// loop stops, and replication falls back to plain AppendEntries as Raft
// does after any pipeline failure. Responses are handed on in order, one
// at a time: the hand-over holds at most one, so a follower has at most
// one request more in flight than MaxRPCsInFlight.
type steadyPipeline struct {
	raft.AppendPipeline // the transport's: AppendEntries
	out                 chan raft.AppendFuture
	closing             chan struct{}
	closeOnce           sync.Once
	forwarded           chan struct{} // closed when forward returns
}

func newSteadyPipeline(p raft.AppendPipeline) *steadyPipeline {
	s := &steadyPipeline{
		AppendPipeline: p,
		out:            make(chan raft.AppendFuture),
		closing:        make(chan struct{}),
		forwarded:      make(chan struct{}),
	}
	go s.forward()
	return s
}

func (s *steadyPipeline) forward() {
	defer close(s.forwarded)
	in := s.AppendPipeline.Consumer()
	for {
		select {
		case f := <-in:
			select {
			case s.out <- f:
			case <-s.closing:
				return
			}
			if endsDecoder(f) {
				// Nobody reads responses any more: free a send that
				// waits for the transport's decoder.
				_ = s.AppendPipeline.Close()
				return
			}
		case <-s.closing:
			return
		}
	}
}

// endsDecoder says whether raft's pipelineDecode returns after this
// response: its own two tests, in its order (an error leaves the response
// unsuccessful).
func endsDecoder(f raft.AppendFuture) bool {
	req, resp := f.Request(), f.Response()
	return resp.Term > req.Term || !resp.Success
}

// Consumer is the responses, in the order their requests were sent.
func (s *steadyPipeline) Consumer() <-chan raft.AppendFuture { return s.out }

// Close closes the transport's pipeline and waits for the responses'
// hand-over to stop.
func (s *steadyPipeline) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	err := s.AppendPipeline.Close()
	<-s.forwarded
	return err
}

// steadyTransport is a member's transport whose pipelines are steady.
type steadyTransport struct {
	*heartbeatGate
}

func (t steadyTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newSteadyPipeline(p), nil
}

var (
	_ raft.AppendPipeline = (*steadyPipeline)(nil)
	_ raft.Transport      = steadyTransport{}
	_ raft.WithPreVote    = steadyTransport{}
	_ raft.WithClose      = steadyTransport{}
)
