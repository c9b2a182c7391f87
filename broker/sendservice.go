package broker

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

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
	// Each message is encoded here, once, in the commitlog's layout: the
	// Raft entry and every replica's commitlog take these bytes.
	var records []byte
	for i, m := range req.Messages {
		var err error
		if records, err = s.encodeMessage(records, req, m); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	if len(records) > b.cfg.EntryMaxBytes {
		return nil, invalid(pb.ErrorReason_MESSAGE_TOO_LARGE, fmt.Sprintf("batch of %d bytes, limit %d", len(records), b.cfg.EntryMaxBytes))
	}
	timeout := b.cfg.SendTimeout
	if req.TimeoutMs > 0 {
		timeout = min(time.Duration(req.TimeoutMs)*time.Millisecond, 10*b.cfg.SendTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	res, err := b.batcher.submit(ctx, records, len(req.Messages))
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

// encodeMessage appends m's record to records, after the checks of the
// send path and the store's.
func (s *service) encodeMessage(records []byte, req *pb.SendMessageRequest, m *pb.Message) ([]byte, error) {
	b := s.b
	switch {
	case m == nil:
		return records, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "empty message")
	case m.Topic != "" && m.Topic != req.Topic:
		return records, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("message topic %q differs from the send's %q", m.Topic, req.Topic))
	case len(m.Body) == 0:
		return records, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "message body is empty")
	case len(m.Body) > b.cfg.MaxMessageSize:
		return records, invalid(pb.ErrorReason_MESSAGE_TOO_LARGE, fmt.Sprintf("body of %d bytes, limit %d", len(m.Body), b.cfg.MaxMessageSize))
	}
	sm := storage.Message{Topic: req.Topic, QueueID: req.QueueId, Flag: m.Flag, Tags: m.Tags, Keys: m.Keys,
		Properties: m.Properties, Body: m.Body, BornTime: m.BornTimestamp}
	records, err := b.store.EncodeRecord(records, &sm)
	if err != nil {
		return records, storeError(err)
	}
	return records, nil
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
