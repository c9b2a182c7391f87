package broker

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// Resetting a group's offsets (RocketMQ's resetOffsetByTime). The new
// offsets are committed through Raft like any commit. A live member of the
// group still holds its old position in memory and would commit it again,
// so the master also keeps a notice per queue reset: the next pull of that
// queue by the group is answered PULL_OFFSET_MOVED with the new offset
// (the push consumer drops what it holds of the queue and goes on from
// there), and until that pull every commit of the queue (riding on pulls,
// or UpdateConsumerOffset) is ignored. The group's held pulls are answered
// at once, so a member long-polling hears of the reset within a round
// trip.
//
// The notices live in the master's memory: a master that fails before a
// member pulls loses them, and that member may commit its old position
// again. Run the reset again then (raftmq group progress shows where the
// group stands).

// offsetResets are the master's notices: the new offset of each queue
// reset, until the group pulls it.
type offsetResets struct {
	mu      sync.Mutex
	pending map[offsetKey]int64
	n       atomic.Int32 // len(pending): every pull asks, and almost always there is none
}

func newOffsetResets() *offsetResets { return &offsetResets{pending: map[offsetKey]int64{}} }

func (r *offsetResets) set(k offsetKey, off int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending[k] = off
	r.n.Store(int32(len(r.pending)))
}

// take returns and forgets the notice of k.
func (r *offsetResets) take(k offsetKey) (int64, bool) {
	if r.n.Load() == 0 {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	off, ok := r.pending[k]
	delete(r.pending, k)
	r.n.Store(int32(len(r.pending)))
	return off, ok
}

// holds reports whether k has a notice not yet delivered.
func (r *offsetResets) holds(k offsetKey) bool {
	if r.n.Load() == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.pending[k]
	return ok
}

// clear drops every notice (this replica is no longer master).
func (r *offsetResets) clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.pending)
	r.n.Store(0)
}

func (s *service) ResetConsumerOffset(ctx context.Context, req *pb.ResetConsumerOffsetRequest) (*pb.ResetConsumerOffsetResponse, error) {
	b := s.b
	switch {
	case !validName(req.ConsumerGroup) || !validName(req.Topic):
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, "group and topic names must match "+message.TopicRule)
	case req.To == nil:
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "say where to: earliest, latest, a timestamp or an offset")
	}
	if err := b.requireMaster(); err != nil {
		return nil, err
	}
	topic := b.meta.topic(req.Topic)
	if topic == nil {
		return nil, statusError(codes.NotFound, pb.ErrorReason_TOPIC_NOT_FOUND, "topic "+req.Topic+" does not exist on "+b.cfg.Group, nil)
	}
	oc := &pb.OffsetCommit{ConsumerGroup: req.ConsumerGroup}
	for q := int32(0); q < topic.ReadQueues; q++ {
		min, max := b.store.QueueOffsets(req.Topic, q)
		var off int64
		switch to := req.To.(type) {
		case *pb.ResetConsumerOffsetRequest_Earliest:
			off = min
		case *pb.ResetConsumerOffsetRequest_Latest:
			off = max
		case *pb.ResetConsumerOffsetRequest_TimestampMs:
			var err error
			if off, err = b.store.OffsetForTime(req.Topic, q, to.TimestampMs); err != nil {
				return nil, storeError(err)
			}
		case *pb.ResetConsumerOffsetRequest_Offset:
			off = to.Offset
		}
		oc.Offsets = append(oc.Offsets, &pb.QueueOffset{Topic: req.Topic, QueueId: q, Offset: clampOffset(off, min, max)})
	}
	if err := b.apply(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_CommitOffsets{CommitOffsets: oc}}); err != nil {
		return nil, err
	}
	for _, o := range oc.Offsets {
		b.resets.set(offsetKey{req.ConsumerGroup, req.Topic, o.QueueId}, o.Offset)
	}
	// Commits of the old positions taken before the notices were set
	// must not be applied after the reset.
	b.offsets.forget(req.ConsumerGroup, req.Topic)
	b.holds.wakeGroup(req.ConsumerGroup)
	b.log.Info("consumer offsets reset", "group", req.ConsumerGroup, "topic", req.Topic, "queues", len(oc.Offsets))
	return &pb.ResetConsumerOffsetResponse{Offsets: oc.Offsets}, nil
}

// clampOffset is off within [lo, hi].
func clampOffset(off, lo, hi int64) int64 { return min(max(off, lo), hi) }

// movedByReset is the answer to a pull of a queue whose offset was reset.
func (b *Broker) movedByReset(req *pb.PullMessageRequest) (*pb.PullMessageResponse, bool) {
	off, ok := b.resets.take(offsetKey{req.ConsumerGroup, req.Topic, req.QueueId})
	if !ok {
		return nil, false
	}
	min, max := b.store.QueueOffsets(req.Topic, req.QueueId)
	return &pb.PullMessageResponse{Status: pb.PullStatus_PULL_OFFSET_MOVED, NextBeginOffset: off, MinOffset: min, MaxOffset: max, ReplicaId: b.self}, true
}
