package broker

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/storage"
)

// service implements pb.BrokerServer over a Broker.
type service struct {
	pb.UnimplementedBrokerServer
	b *Broker
}

// SendMessage stores one message or a batch on topic@queue and answers
// once the entry holding them is committed on a quorum and applied here.
// Every message is checked before it joins a group-commit entry, so one
// bad message fails only its own request.
func (s *service) SendMessage(ctx context.Context, req *pb.SendMessageRequest) (*pb.SendMessageResponse, error) {
	b := s.b
	if err := b.requireMaster(); err != nil {
		return nil, err
	}
	if !validName(req.Topic) {
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, fmt.Sprintf("topic %q must match [A-Za-z0-9_%%-]{1,127}", req.Topic))
	}
	switch n := len(req.Messages); {
	case n == 0:
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "no messages to send")
	case n > b.cfg.MaxBatchMessages:
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("%d messages in one send, limit %d", n, b.cfg.MaxBatchMessages))
	}
	if req.Topic == ScheduleTopic {
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, ScheduleTopic+" is reserved for delayed messages")
	}
	topic, err := s.topicForSend(ctx, req.Topic)
	if err != nil {
		return nil, err
	}
	if topic.Perm&PermWrite == 0 {
		return nil, statusError(codes.PermissionDenied, pb.ErrorReason_NO_PERMISSION, "topic "+req.Topic+" is not writable", nil)
	}
	if req.QueueId < 0 || req.QueueId >= topic.WriteQueues {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("queue id %d out of range [0, %d) of topic %s", req.QueueId, topic.WriteQueues, req.Topic))
	}
	msgs := make([]*pb.StoredMessage, len(req.Messages))
	bytes := 0
	for i, m := range req.Messages {
		if err := s.checkMessage(req, m); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		m.Topic = req.Topic
		msgs[i] = &pb.StoredMessage{Message: m, QueueId: req.QueueId}
		bytes += protoSize(msgs[i])
	}
	if bytes > b.cfg.EntryMaxBytes {
		return nil, invalid(pb.ErrorReason_MESSAGE_TOO_LARGE, fmt.Sprintf("batch of %d bytes, limit %d", bytes, b.cfg.EntryMaxBytes))
	}
	timeout := b.cfg.SendTimeout
	if req.TimeoutMs > 0 {
		timeout = min(time.Duration(req.TimeoutMs)*time.Millisecond, 10*b.cfg.SendTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	res, err := b.batcher.submit(ctx, msgs, bytes)
	if err != nil {
		return nil, err
	}
	b.metrics.sendSeconds.Observe(time.Since(start).Seconds())
	b.metrics.sendMessages.Add(float64(len(res)))
	out := &pb.SendMessageResponse{Group: b.cfg.Group, QueueId: req.QueueId, Results: make([]*pb.SendResult, len(res))}
	for i, r := range res {
		out.Results[i] = &pb.SendResult{
			MsgId:           storage.FormatMessageID(b.cfg.Group, r.Offset),
			QueueOffset:     r.QueueOffset,
			CommitlogOffset: r.Offset,
		}
	}
	return out, nil
}

func (s *service) checkMessage(req *pb.SendMessageRequest, m *pb.Message) error {
	b := s.b
	switch {
	case m == nil:
		return invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "empty message")
	case m.Topic != "" && m.Topic != req.Topic:
		return invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("message topic %q differs from the send's %q", m.Topic, req.Topic))
	case len(m.Body) == 0:
		return invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "message body is empty")
	case len(m.Body) > b.cfg.MaxMessageSize:
		return invalid(pb.ErrorReason_MESSAGE_TOO_LARGE, fmt.Sprintf("body of %d bytes, limit %d", len(m.Body), b.cfg.MaxMessageSize))
	}
	sm := storage.Message{Topic: req.Topic, QueueID: req.QueueId, Tags: m.Tags, Keys: m.Keys, Properties: m.Properties, Body: m.Body}
	if err := b.store.CheckMessage(&sm); err != nil {
		return storeError(err)
	}
	return nil
}

// topicForSend returns the topic's config, creating it in dev mode.
func (s *service) topicForSend(ctx context.Context, name string) (*pb.TopicConfig, error) {
	b := s.b
	if t := b.meta.topic(name); t != nil {
		return t, nil
	}
	if !b.cfg.AutoCreateTopics {
		return nil, statusError(codes.NotFound, pb.ErrorReason_TOPIC_NOT_FOUND, "topic "+name+" does not exist on "+b.cfg.Group, nil)
	}
	t := &pb.TopicConfig{Name: name, ReadQueues: b.cfg.DefaultQueues, WriteQueues: b.cfg.DefaultQueues, Perm: PermRead | PermWrite}
	if err := b.apply(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_UpsertTopic{UpsertTopic: t}}); err != nil {
		return nil, err
	}
	b.log.Info("topic created on first send", "topic", name, "queues", t.WriteQueues)
	if got := b.meta.topic(name); got != nil {
		return got, nil
	}
	return t, nil
}

func protoSize(m proto.Message) int { return proto.Size(m) }
