package broker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

// PullMessage reads a queue from an offset (docs/design.md, "The read path
// and long polling"). When there is nothing new and the pull may wait, the
// master holds it until a message arrives, its suspend timeout passes or
// the client goes away; a slave answers at once and sends the consumer
// back to the master, where arrivals are notified.
func (s *service) PullMessage(ctx context.Context, req *pb.PullMessageRequest) (*pb.PullMessageResponse, error) {
	start := time.Now()
	resp, err := s.pull(ctx, req)
	if err == nil {
		s.b.metrics.pulls.WithLabelValues(resp.Status.String()).Inc()
		s.b.metrics.pullSeconds.Observe(time.Since(start).Seconds())
	}
	return resp, err
}

func (s *service) pull(ctx context.Context, req *pb.PullMessageRequest) (*pb.PullMessageResponse, error) {
	b := s.b
	switch {
	case !validName(req.ConsumerGroup):
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, fmt.Sprintf("consumer group %q must match %s", req.ConsumerGroup, message.TopicRule))
	case !validName(req.Topic):
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, fmt.Sprintf("topic %q must match %s", req.Topic, message.TopicRule))
	case req.QueueOffset < 0 || req.MaxMessages < 0 || req.SuspendTimeoutMs < 0 || req.CommitOffset < 0:
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "offsets, max messages and suspend timeout must not be negative")
	}
	topic := b.meta.topic(req.Topic)
	if topic == nil {
		return nil, statusError(codes.NotFound, pb.ErrorReason_TOPIC_NOT_FOUND, "topic "+req.Topic+" does not exist on "+b.cfg.Group, nil)
	}
	if topic.Perm&message.PermRead == 0 && !(req.DeadLetters && strings.HasPrefix(req.Topic, message.DLQPrefix)) {
		return nil, statusError(codes.PermissionDenied, pb.ErrorReason_NO_PERMISSION, "topic "+req.Topic+" is not readable", nil)
	}
	if req.QueueId < 0 || req.QueueId >= topic.ReadQueues {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("queue id %d out of range [0, %d) of topic %s", req.QueueId, topic.ReadQueues, req.Topic))
	}
	tags, err := parseSubscription(req.Subscription)
	if err != nil {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, err.Error())
	}
	master := b.master.Load()
	if master {
		if resp, moved := b.movedByReset(req); moved {
			return resp, nil // its commit is of the position before the reset
		}
	}
	if req.CommitOffset > 0 && master {
		b.offsets.add(req.ConsumerGroup, req.Topic, req.QueueId, req.CommitOffset)
	}
	get := storage.GetRequest{
		Topic:       req.Topic,
		QueueID:     req.QueueId,
		Offset:      req.QueueOffset,
		MaxMessages: b.cfg.PullMaxMessages,
		MaxBytes:    b.cfg.PullMaxBytes,
		TagHashes:   tags,
	}
	if req.MaxMessages > 0 {
		get.MaxMessages = min(int(req.MaxMessages), b.cfg.PullMaxMessages)
	}
	res, err := b.store.GetMessages(get)
	if err != nil {
		return nil, b.readError(err)
	}
	suspend := min(time.Duration(req.SuspendTimeoutMs)*time.Millisecond, b.cfg.MaxSuspend)
	if res.Status == storage.NoNewMessage && suspend > 0 && master && !b.consumers.changedFor(req.ClientId, req.ConsumerGroup) {
		if res, err = s.longPoll(ctx, get, req.ConsumerGroup, suspend); err != nil {
			return nil, err
		}
	}
	if master {
		if resp, moved := b.movedByReset(req); moved { // reset while it was held
			return resp, nil
		}
	}
	resp := b.pullResponse(res, master, req.QueueId, req.QueueOffset)
	resp.GroupChanged = b.consumers.noticeChange(req.ClientId, req.ConsumerGroup)
	return resp, nil
}

// longPoll holds the pull in the hold service (holdservice.go) until its
// queue may have what it wants, then reads the queue again.
func (s *service) longPoll(ctx context.Context, get storage.GetRequest, group string, suspend time.Duration) (storage.GetResult, error) {
	b := s.b
	p := &heldPull{client: clientKey(ctx), group: group, key: queueKey{get.Topic, get.QueueID}, offset: get.Offset, tagHashes: get.TagHashes}
	switch b.holds.wait(ctx, p, suspend) {
	case wokeCancelled:
		return storage.GetResult{}, status.FromContextError(ctx.Err()).Err()
	case wokeOverCap:
		// Answered now; the client pulls again.
		return b.store.GetMessages(get)
	}
	if err := b.failedError(); err != nil { // woken because the store failed
		return storage.GetResult{}, err
	}
	res, err := b.store.GetMessages(get)
	if err != nil {
		return res, b.readError(err)
	}
	return res, nil
}

var pullStatus = map[storage.GetStatus]pb.PullStatus{
	storage.Found:            pb.PullStatus_PULL_FOUND,
	storage.NoNewMessage:     pb.PullStatus_PULL_NO_NEW_MESSAGE,
	storage.NoMatchedMessage: pb.PullStatus_PULL_NO_MATCHED_MESSAGE,
	storage.OffsetTooSmall:   pb.PullStatus_PULL_OFFSET_MOVED,
	storage.OffsetOverflow:   pb.PullStatus_PULL_OFFSET_ILLEGAL,
}

// pullResponse turns a read into an answer, with a replica suggestion: the
// master sends a consumer far behind to a slave (its data is cold there
// too, and the master keeps its cache and disk for the writers), and a
// slave sends a consumer that has caught up back to the master. A slave
// that has not yet applied what the consumer asks for says so with no new
// message, never by "correcting" the offset back to its own end.
func (b *Broker) pullResponse(res storage.GetResult, master bool, queue int32, offset int64) *pb.PullMessageResponse {
	if !master && res.Status == storage.OffsetOverflow {
		res.Status, res.NextOffset = storage.NoNewMessage, offset
	}
	out := &pb.PullMessageResponse{
		Status:          pullStatus[res.Status],
		NextBeginOffset: res.NextOffset,
		MinOffset:       res.MinOffset,
		MaxOffset:       res.MaxOffset,
		Records:         res.Records,
		ReplicaId:       b.self,
	}
	lag := res.MaxOffset - res.NextOffset
	switch {
	case b.cfg.SlaveReadLag < 0:
	case master && res.Status == storage.Found && lag > b.cfg.SlaveReadLag:
		out.SuggestReplicaId = b.pickSlave(queue)
	case !master && (res.Status != storage.Found || lag < b.cfg.SlaveReadLag/2):
		out.SuggestReplicaId, _ = b.leaderInfo()
	}
	return out
}

// pickSlave chooses a follower to read a queue from, spreading queues.
func (b *Broker) pickSlave(queue int32) int32 {
	f := b.node.Raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	var slaves []int32
	for _, srv := range f.Configuration().Servers {
		id, err := strconv.Atoi(string(srv.ID))
		if err == nil && int32(id) != b.self && srv.Suffrage == raft.Voter {
			slaves = append(slaves, int32(id))
		}
	}
	if len(slaves) == 0 {
		return 0
	}
	return slaves[int(queue)%len(slaves)]
}

// parseSubscription turns "*", "" or "TagA || TagB" into the tag hashes a
// read keeps (nil: all).
func parseSubscription(expr string) ([]int64, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" || expr == "*" {
		return nil, nil
	}
	var hashes []int64
	for _, tag := range strings.Split(expr, "||") {
		tag = strings.TrimSpace(tag)
		if tag == "" || tag == "*" {
			return nil, fmt.Errorf("subscription %q: want \"*\" or tags joined by \"||\"", expr)
		}
		hashes = append(hashes, message.TagHash(tag))
	}
	return hashes, nil
}
