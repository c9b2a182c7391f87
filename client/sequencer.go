package client

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
)

// sequencer makes a producer idempotent the way Kafka's is (KIP-98): each
// broker group issues it a producer id and epoch (InitProducer, asked on
// its first send to the group), and it numbers its messages per queue. A
// send keeps its numbers on every try on its queue, so the group's state
// machine knows a retry for what it is, on whichever replica is the master
// by then, and answers with the first copy (the broker's producers.go).
//
// A send's numbers are fixed by its first try on a queue, and so is their
// absence: a send first tried without an id (the group could not be asked)
// is retried without one, and its unique keys decide, as for a group that
// issues no ids (an older broker, or deduplication off).
type sequencer struct {
	mu     sync.Mutex
	groups map[string]*groupID
	next   map[MessageQueue]int64
}

// groupID is the producer's id on one group, once asked (done closed).
type groupID struct {
	done  chan struct{}
	ok    bool  // the group answered (set before done is closed)
	id    int64 // 0: none (the group issues no ids)
	epoch int32
}

// seqAssign is a send's numbers on one queue: g nil for none.
type seqAssign struct {
	mq    MessageQueue
	g     *groupID // the producer's id and epoch on mq's group
	first int64
}

// numbers are what a try of the send carries: producer id, epoch and
// first sequence, zeros for none.
func (a *seqAssign) numbers() (int64, int32, int64) {
	if a.g == nil {
		return 0, 0, 0
	}
	return a.g.id, a.g.epoch, a.first
}

func newSequencer() *sequencer {
	return &sequencer{groups: map[string]*groupID{}, next: map[MessageQueue]int64{}}
}

// assign numbers n messages sent to mq, asking b (the group's master) for
// the producer's id on the group first if it was not asked yet. A failure
// to ask leaves this send without numbers, and the next send asks again.
func (s *sequencer) assign(ctx context.Context, b pb.BrokerClient, mq MessageQueue, n int) seqAssign {
	g, ok := s.group(ctx, b, mq)
	if !ok || g.id == 0 {
		return seqAssign{mq: mq}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	first := s.next[mq]
	s.next[mq] = first + int64(n)
	return seqAssign{mq: mq, g: g, first: first}
}

// group is the producer's id on mq's group, asked of b if nobody asked
// yet; false when the asking failed.
func (s *sequencer) group(ctx context.Context, b pb.BrokerClient, mq MessageQueue) (*groupID, bool) {
	s.mu.Lock()
	g := s.groups[mq.Group]
	if g != nil {
		s.mu.Unlock()
		select {
		case <-g.done:
			return g, g.ok
		case <-ctx.Done():
			return nil, false
		}
	}
	g = &groupID{done: make(chan struct{})}
	s.groups[mq.Group] = g
	s.mu.Unlock()
	defer close(g.done)
	resp, err := b.InitProducer(ctx, &pb.InitProducerRequest{Topic: mq.Topic})
	switch {
	case err == nil:
		g.ok, g.id, g.epoch = true, resp.ProducerId, resp.ProducerEpoch
		return g, true
	case noProducerIDs(err):
		g.ok = true // id 0, for good
		return g, true
	}
	s.forget(mq.Group, g)
	return nil, false
}

// noProducerIDs says whether err is a group's answer that it issues no
// producer ids: a broker from before them, or one with deduplication off.
func noProducerIDs(err error) bool {
	reason, _ := pb.ReasonOf(err)
	return status.Code(err) == codes.Unimplemented ||
		status.Code(err) == codes.FailedPrecondition && reason == pb.ErrorReason_ILLEGAL_ARGUMENT
}

// forget drops g as the producer's id on group (asking failed, or the
// group forgot it: UNKNOWN_PRODUCER): the next send asks again.
func (s *sequencer) forget(group string, g *groupID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups[group] == g {
		delete(s.groups, group)
	}
}
