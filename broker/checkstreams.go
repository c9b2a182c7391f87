package broker

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// Check-back streams: a transactional producer keeps one open to each
// master it may have sent halves to (CheckTransactions), naming its
// producer group and its topics; the master sends it checks of its
// group's halves of those topics, and it answers each with an end on the
// same stream. The streams are this replica's connection state, as
// RocketMQ's producer channels are, never replicated: a replica that stops
// being master closes them, and the producers open them again to the new
// one, which checks back from the replicated half table.

// checkStreamBuffer bounds the checks waiting to be written to one stream;
// a check that finds it full is not sent (it is counted, and the half is
// checked again after the interval).
const checkStreamBuffer = 1024

// maxCheckTopics bounds the topics one check-back stream may name.
const maxCheckTopics = 1024

// checkStream is one producer's open stream.
type checkStream struct {
	group  string
	topics map[string]bool
	out    chan *pb.TransactionCheck
	done   chan struct{} // closed when this replica stops being master
}

// checkStreams holds the open streams by producer group.
type checkStreams struct {
	mu      sync.Mutex
	byGroup map[string][]*checkStream
	next    map[string]int // round-robin position per group
}

func newCheckStreams() *checkStreams {
	return &checkStreams{byGroup: map[string][]*checkStream{}, next: map[string]int{}}
}

func (cs *checkStreams) join(group string, topics []string) *checkStream {
	s := &checkStream{group: group, topics: map[string]bool{}, out: make(chan *pb.TransactionCheck, checkStreamBuffer), done: make(chan struct{})}
	for _, t := range topics {
		s.topics[t] = true
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.byGroup[group] = append(cs.byGroup[group], s)
	return s
}

func (cs *checkStreams) leave(s *checkStream) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	list := cs.byGroup[s.group]
	for i, o := range list {
		if o == s {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(cs.byGroup, s.group)
		delete(cs.next, s.group)
		return
	}
	cs.byGroup[s.group] = list
}

// send queues c on a stream of group that named topic, round robin over
// them, and says whether one took it.
func (cs *checkStreams) send(group, topic string, c *pb.TransactionCheck) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	list := cs.byGroup[group]
	for i := range list {
		s := list[(cs.next[group]+i)%len(list)]
		if !s.topics[topic] {
			continue
		}
		select {
		case s.out <- c:
			cs.next[group] = (cs.next[group] + i + 1) % len(list)
			return true
		default:
		}
	}
	return false
}

// closeAll ends every stream: this replica is no longer master.
func (cs *checkStreams) closeAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, list := range cs.byGroup {
		for _, s := range list {
			select {
			case <-s.done:
			default:
				close(s.done)
			}
		}
	}
}

// CheckTransactions serves a producer's check-back stream while this
// replica is master.
func (s *service) CheckTransactions(stream pb.Broker_CheckTransactionsServer) error {
	b := s.b
	hello, err := stream.Recv()
	if err != nil {
		return err
	}
	switch {
	case !validName(hello.ProducerGroup):
		return invalid(pb.ErrorReason_ILLEGAL_NAME, fmt.Sprintf("producer group %q must match %s", hello.ProducerGroup, message.TopicRule))
	case len(hello.Topics) == 0:
		return invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "a check-back stream names the topics its producer sends to")
	case len(hello.Topics) > maxCheckTopics:
		return invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("%d topics on one check-back stream", len(hello.Topics)))
	}
	for _, t := range hello.Topics {
		if !validName(t) {
			return invalid(pb.ErrorReason_ILLEGAL_NAME, fmt.Sprintf("topic %q must match %s", t, message.TopicRule))
		}
	}
	if err := b.requireMaster(); err != nil {
		return err
	}
	cs := b.checkStreams.join(hello.ProducerGroup, hello.Topics)
	defer b.checkStreams.leave(cs)
	if !b.master.Load() { // lost between the check and the join: closeAll may have missed it
		return b.notLeader()
	}
	ctx := stream.Context()
	recvd := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvd <- err
				return
			}
			if a := req.Answer; a != nil && a.Outcome != pb.TransactionOutcome_TRANSACTION_UNKNOWN {
				a.FromCheck = true
				if _, err := b.endTransaction(ctx, a); err != nil {
					b.log.Info("transaction check-back: the producer's answer was not applied", "producer_group", hello.ProducerGroup, "half", a.MsgId, "err", err)
				}
			}
		}
	}()
	for {
		select {
		case <-cs.done:
			return b.notLeader()
		case err := <-recvd:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case c := <-cs.out:
			if err := stream.Send(c); err != nil {
				return err
			}
		}
	}
}
