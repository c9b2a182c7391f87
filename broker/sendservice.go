package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
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
	c, err := s.checkSend(ctx, req)
	if err != nil {
		return nil, err
	}
	res, start, err := s.submit(ctx, c)
	if err != nil {
		return nil, err
	}
	return s.sent(req, res, start), nil
}

// submit stores a checked send through group commit on its own and waits
// for it within its timeout; start is when it was handed over.
func (s *service) submit(ctx context.Context, c checkedSend) (res []storage.AppendResult, start time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start = time.Now()
	res, err = s.b.batcher.submit(ctx, c.records, c.n, c.seq)
	return res, start, err
}

// checkedSend is a send checked and its records encoded, ready for group
// commit, and how long its sender waits for it.
type checkedSend struct {
	req     *pb.SendMessageRequest
	records []byte
	n       int
	seq     sendSeq
	timeout time.Duration
}

// checkSend checks req as SendMessage takes it (a failed store and this
// replica being master first) and returns its records.
func (s *service) checkSend(ctx context.Context, req *pb.SendMessageRequest) (checkedSend, error) {
	b := s.b
	if err := b.requireMaster(); err != nil {
		return checkedSend{}, err
	}
	if !validName(req.Topic) {
		return checkedSend{}, invalid(pb.ErrorReason_ILLEGAL_NAME, fmt.Sprintf("topic %q must match %s", req.Topic, message.TopicRule))
	}
	if message.Reserved(req.Topic) {
		return checkedSend{}, invalid(pb.ErrorReason_ILLEGAL_NAME, req.Topic+" is the broker's own topic (delayed and transactional messages)")
	}
	switch {
	case len(req.Messages) == 0 && len(req.Records) == 0:
		return checkedSend{}, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "no messages to send")
	case len(req.Messages) > 0 && len(req.Records) > 0:
		return checkedSend{}, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "a send carries messages or records, not both")
	case len(req.Messages) > b.cfg.MaxBatchMessages:
		return checkedSend{}, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("%d messages in one send, limit %d", len(req.Messages), b.cfg.MaxBatchMessages))
	}
	topic, err := s.topicForSend(ctx, req.Topic)
	if err != nil {
		return checkedSend{}, err
	}
	if topic.Perm&message.PermWrite == 0 {
		return checkedSend{}, statusError(codes.PermissionDenied, pb.ErrorReason_NO_PERMISSION, "topic "+req.Topic+" is not writable", nil)
	}
	if req.QueueId < 0 || req.QueueId >= topic.WriteQueues {
		return checkedSend{}, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("queue id %d out of range [0, %d) of topic %s", req.QueueId, topic.WriteQueues, req.Topic))
	}
	seq, err := s.sendSequence(req)
	if err != nil {
		return checkedSend{}, err
	}
	records, n, err := s.sendRecords(req)
	if err != nil {
		return checkedSend{}, err
	}
	seq.n = n
	if b.cfg.DedupWindow > 0 && seq.producer == 0 {
		// A producer without an id is deduplicated by its unique keys;
		// one with an id by its sequences (producers.go).
		if err := message.MarkDedup(records); err != nil {
			return checkedSend{}, storeError(err)
		}
	}
	if len(records) > b.cfg.EntryMaxBytes {
		return checkedSend{}, invalid(pb.ErrorReason_MESSAGE_TOO_LARGE, fmt.Sprintf("batch of %d bytes, limit %d", len(records), b.cfg.EntryMaxBytes))
	}
	timeout := b.cfg.SendTimeout
	if req.TimeoutMs > 0 {
		timeout = min(time.Duration(req.TimeoutMs)*time.Millisecond, 10*b.cfg.SendTimeout)
	}
	return checkedSend{req: req, records: records, n: n, seq: seq, timeout: timeout}, nil
}

// sent is the answer to req, whose messages were stored as res, counted
// in the metrics with the time since start.
func (s *service) sent(req *pb.SendMessageRequest, res []storage.AppendResult, start time.Time) *pb.SendMessageResponse {
	b := s.b
	b.metrics.sendSeconds.Observe(time.Since(start).Seconds())
	out := &pb.SendMessageResponse{Group: b.cfg.Group, QueueId: req.QueueId, Results: make([]*pb.SendResult, len(res))}
	for i, r := range res {
		if r.Duplicate {
			b.metrics.sendDuplicates.Inc()
		} else {
			b.metrics.sendMessages.Inc()
		}
		out.Results[i] = b.sendResult(r)
	}
	return out
}

// sendSequence is what the send says of an idempotent producer, checked;
// producer 0 when it is none's, or when deduplication is off.
func (s *service) sendSequence(req *pb.SendMessageRequest) (sendSeq, error) {
	switch {
	case req.ProducerId == 0 || s.b.cfg.DedupWindow <= 0:
		return sendSeq{}, nil
	case req.ProducerId < 0 || req.ProducerEpoch < 0 || req.Sequence < 0:
		return sendSeq{}, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("producer id %d, epoch %d and sequence %d must not be negative", req.ProducerId, req.ProducerEpoch, req.Sequence))
	}
	return sendSeq{producer: req.ProducerId, epoch: req.ProducerEpoch, first: req.Sequence, topic: req.Topic, queue: req.QueueId}, nil
}

// InitProducer issues an idempotent producer an id on this group, or a
// new epoch of its id (producers.go), through Raft.
func (s *service) InitProducer(ctx context.Context, req *pb.InitProducerRequest) (*pb.InitProducerResponse, error) {
	b := s.b
	if err := b.requireMaster(); err != nil {
		return nil, err
	}
	switch {
	case !validName(req.Topic):
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, fmt.Sprintf("topic %q must match %s", req.Topic, message.TopicRule))
	case req.ProducerId < 0:
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("producer id %d is negative", req.ProducerId))
	case b.cfg.DedupWindow <= 0:
		return nil, statusError(codes.FailedPrecondition, pb.ErrorReason_ILLEGAL_ARGUMENT, "deduplication is off on this broker (--dedup-window off)", nil)
	}
	conn := grpcConnOf(ctx)
	if req.ProducerId == 0 && !b.producerIDs.take(conn) {
		return nil, statusError(codes.ResourceExhausted, pb.ErrorReason_TOO_MANY_REQUESTS,
			fmt.Sprintf("this connection was issued %d producer ids, the limit", b.cfg.MaxProducersPerConn), nil)
	}
	res, err := b.propose(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_InitProducer{InitProducer: &pb.InitProducer{
		ProducerId: req.ProducerId, StoreTimestamp: time.Now().UnixMilli()}}})
	switch {
	case err != nil:
		return nil, err
	case errors.Is(res.producer.refused, errTooManyProducers):
		return nil, statusError(codes.ResourceExhausted, pb.ErrorReason_TOO_MANY_REQUESTS, res.producer.refused.Error(), nil)
	case res.producer.refused != nil:
		return nil, statusError(codes.FailedPrecondition, pb.ErrorReason_UNKNOWN_PRODUCER, res.producer.refused.Error(), nil)
	}
	return &pb.InitProducerResponse{Group: b.cfg.Group, ProducerId: res.producer.id, ProducerEpoch: res.producer.epoch,
		WindowMs: b.cfg.DedupWindow.Milliseconds()}, nil
}

// sendResult is where a message was stored, as a send is answered.
func (b *Broker) sendResult(r storage.AppendResult) *pb.SendResult {
	return &pb.SendResult{MsgId: message.FormatID(b.cfg.Group, r.Offset), QueueOffset: r.QueueOffset, CommitlogOffset: r.Offset}
}

// sendRecords returns the send's messages as records in the commitlog's
// layout, and how many there are. Records the producer encoded are checked
// in place and taken as they came; messages are encoded here, once. Either
// way the Raft entry and every replica's commitlog take these bytes.
func (s *service) sendRecords(req *pb.SendMessageRequest) ([]byte, int, error) {
	if len(req.Records) > 0 {
		if len(req.Records) > s.b.cfg.EntryMaxBytes { // before reading any of it
			return nil, 0, invalid(pb.ErrorReason_MESSAGE_TOO_LARGE, fmt.Sprintf("batch of %d bytes, limit %d", len(req.Records), s.b.cfg.EntryMaxBytes))
		}
		n, held, err := s.checkRecords(req)
		if err != nil || !held {
			return req.Records, n, err
		}
		records, err := s.holdRecords(req.Records)
		return records, n, err
	}
	var records []byte
	for i, m := range req.Messages {
		var err error
		if records, err = s.encodeMessage(records, req, m); err != nil {
			return nil, 0, fmt.Errorf("message %d: %w", i, err)
		}
	}
	return records, len(req.Messages), nil
}

// checkRecords checks, without decoding a message, that req.Records holds
// records the store will take (framing, CRC, size and queue limits), each
// of req's topic and queue, with a body within the limit, and no more of
// them than a send may carry. It returns their number, and whether any of
// them asks for a delay or is a half message.
func (s *service) checkRecords(req *pb.SendMessageRequest) (int, bool, error) {
	b := s.b
	n, held := 0, false
	for p := 0; p < len(req.Records); n++ {
		if n == b.cfg.MaxBatchMessages {
			return 0, false, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("more than %d messages in one send", b.cfg.MaxBatchMessages))
		}
		size, v, err := b.store.CheckRecord(req.Records[p:])
		reason, problem := pb.ErrorReason_ILLEGAL_ARGUMENT, ""
		switch {
		case err != nil:
			return 0, false, storeError(fmt.Errorf("record %d: %w", n, err))
		case string(v.Topic) != req.Topic:
			problem = fmt.Sprintf("topic %q differs from the send's %q", v.Topic, req.Topic)
		case v.QueueID != req.QueueId:
			problem = fmt.Sprintf("queue id %d differs from the send's %d", v.QueueID, req.QueueId)
		case v.BodyLen == 0:
			problem = "message body is empty"
		case v.BodyLen > b.cfg.MaxMessageSize:
			reason, problem = pb.ErrorReason_MESSAGE_TOO_LARGE, fmt.Sprintf("body of %d bytes, limit %d", v.BodyLen, b.cfg.MaxMessageSize)
		}
		if problem != "" {
			return 0, false, invalid(reason, fmt.Sprintf("record %d: %s", n, problem))
		}
		held = held || v.Delayed || v.Half
		p += size
	}
	return n, held, nil
}

// holdRecords returns records checkRecords passed with the half messages
// and those that ask for a delay turned into their copies in the half or
// schedule topic (holdSend); the others are taken as they came.
func (s *service) holdRecords(records []byte) ([]byte, error) {
	b := s.b
	out := make([]byte, 0, len(records)+len(records)/4)
	now := time.Now()
	for p, n := 0, 0; p < len(records); n++ {
		size, v, err := message.Frame(records[p:], false) // checked already: only where it ends
		if err != nil {
			return nil, storeError(err)
		}
		rec := records[p : p+size]
		p += size
		if !v.Delayed && !v.Half {
			out = append(out, rec...)
			continue
		}
		r, err := message.Decode(rec)
		if err != nil {
			return nil, storeError(err)
		}
		m := message.Message{Topic: r.Topic, QueueID: r.QueueID, Flag: r.Flag, Tags: r.Tags, Keys: r.Keys,
			Properties: r.Properties, Body: r.Body, BornTime: r.BornTime}
		if err := b.holdSend(&m, now); err != nil {
			return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("record %d: %v", n, err))
		}
		if out, err = b.store.EncodeRecord(out, &m); err != nil {
			return nil, storeError(fmt.Errorf("record %d: %w", n, err))
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
	sm := messageFromPB(m, req.Topic, req.QueueId)
	if err := b.holdSend(&sm, time.Now()); err != nil {
		return records, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, err.Error())
	}
	records, err := b.store.EncodeRecord(records, &sm)
	if err != nil {
		return records, storeError(err)
	}
	return records, nil
}

// messageFromPB is m, a message sent as protobuf, as the store takes it on
// topic's queue (a message in a send may leave its topic empty: it is the
// send's). The store time is the master's to set.
func messageFromPB(m *pb.Message, topic string, queue int32) message.Message {
	return message.Message{Topic: topic, QueueID: queue, Flag: m.Flag, Tags: m.Tags, Keys: m.Keys,
		Properties: m.Properties, Body: m.Body, BornTime: m.BornTimestamp}
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
	t := &pb.TopicConfig{Name: name, ReadQueues: b.cfg.DefaultQueues, WriteQueues: b.cfg.DefaultQueues, Perm: message.PermRead | message.PermWrite}
	if err := b.apply(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_UpsertTopic{UpsertTopic: t}}); err != nil {
		return nil, err
	}
	b.log.Info("topic created on first send", "topic", name, "queues", t.WriteQueues)
	if got := b.meta.topic(name); got != nil {
		return got, nil
	}
	return t, nil
}
