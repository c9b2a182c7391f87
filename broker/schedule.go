package broker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

// Retries and dead letters, as RocketMQ does them: a message a consumer
// could not consume is sent back (ConsumerSendBack); the master stores a
// copy in the schedule topic's queue for its delay level, and the schedule
// service moves it, once due, to the group's retry topic %RETRY%<group>,
// which the group's consumers also read. After MaxReconsumeTimes it goes
// to the dead-letter topic %DLQ%<group> instead.
//
// A move is one Raft entry holding both the moved messages and the
// schedule queue's new cursor, so a new master resumes exactly where the
// old one stopped: nothing is lost or moved twice. Timer messages use the
// same queues and moves (timers.go).

// DefaultDelayLevels are RocketMQ's.
const DefaultDelayLevels = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

func parseDelayLevels(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Fields(s) {
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("broker: delay level %q is not a positive duration", f)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("broker: no delay levels in %q", s)
	}
	return out, nil
}

// scheduleLoop moves due messages while this replica is master: one
// goroutine per schedule queue in use. A queue's moves must follow one
// another (each is read from the cursor the last one left), but entries of
// different queues share Raft's pipeline, and a queue with a backlog holds
// up no other. With one loop over the queues, 10k timers/s fired 0.7 s
// late at the median (raftmq bench timers, dev cluster).
func (b *Broker) scheduleLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	start := func(q int32) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			every(ctx, b.cfg.ScheduleInterval, func(time.Time) { b.drainSchedule(ctx, q) })
		}()
	}
	for q := range int32(len(b.delays)) {
		start(q)
	}
	for i := range int32(len(b.ladder)) {
		start(timerQueueBase + i)
	}
}

// drainSchedule moves a schedule queue until its head is not due: a burst
// of timers due at once goes out in as many entries as it takes.
func (b *Broker) drainSchedule(ctx context.Context, queue int32) {
	for b.master.Load() && !b.gate.paused() {
		moved, err := b.moveDue(ctx, queue)
		if err != nil && ctx.Err() == nil {
			b.log.Warn("schedule service: move failed", "queue", queue, "err", err)
		}
		if !moved || err != nil {
			return
		}
	}
}

// scheduleEnd is the end offset of a schedule queue.
func (b *Broker) scheduleEnd(queue int32) int64 {
	_, end := b.store.QueueOffsets(message.ScheduleTopic, queue)
	return end
}

// scheduleBatch caps the messages of one move entry.
const scheduleBatch = 256

// moveDue moves the due messages at the head of a schedule queue, in one
// Raft entry with the queue's new cursor, and says whether it moved any.
func (b *Broker) moveDue(ctx context.Context, queue int32) (bool, error) {
	level := queue + 1 // the cursors' key, a delay level for the level queues
	cursor := b.meta.scheduleOffset(level)
	if cursor >= b.scheduleEnd(queue) {
		return false, nil
	}
	res, err := b.store.GetMessages(storage.GetRequest{Topic: message.ScheduleTopic, QueueID: queue, Offset: cursor,
		MaxMessages: scheduleBatch, MaxBytes: b.cfg.EntryMaxBytes / 2})
	if err != nil {
		return false, err
	}
	next := cursor
	if res.Status == storage.OffsetTooSmall {
		// Retention deleted them before they were due: under disk
		// pressure (RetentionDiskRatio) it deletes the oldest segments
		// whatever they hold, as it does unconsumed messages.
		b.log.Warn("schedule service: delayed messages deleted by retention before they were due",
			"queue", queue, "from", cursor, "to", res.NextOffset, "lost", res.NextOffset-cursor)
		next = res.NextOffset
	}
	// The moved messages go as records, encoded here once; every replica
	// appends them as they are. As protobuf messages, applying them took
	// 10% of the master's CPU with 10k timers/s due, unmarshalling the
	// entries more (pprof, deploy/bench-local.sh --timers --profile-bench
	// timers).
	var moved []byte
	now := time.Now()
	delay := b.scheduleDelay(queue)
	for _, raw := range res.Records {
		r, err := message.Decode(raw)
		if err != nil {
			return false, err
		}
		if time.UnixMilli(r.StoreTime).Add(delay).After(now) {
			break // the queue is in due order: the rest waits too
		}
		if m, ok := b.dueMessage(r, queue, now); ok {
			if moved, err = b.store.EncodeRecord(moved, &m); err != nil {
				return false, err
			}
		}
		next = r.QueueOffset + 1
	}
	if next == cursor {
		return false, nil
	}
	if err := message.SetStoreTime(moved, now.UnixMilli()); err != nil {
		return false, err
	}
	err = b.apply(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_Send{Send: &pb.SendBatch{
		StoreTimestamp: now.UnixMilli(), Records: moved,
		ScheduleOffsets: map[int32]int64{level: next}, ScheduleFrom: map[int32]int64{level: cursor},
	}}})
	return err == nil, err
}

// ConsumerSendBack takes back a message a consumer could not consume: to
// the schedule topic for a later retry, or to the dead-letter topic after
// too many.
func (s *service) ConsumerSendBack(ctx context.Context, req *pb.ConsumerSendBackRequest) (*pb.ConsumerSendBackResponse, error) {
	b := s.b
	if !validName(req.ConsumerGroup) {
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, "group name must match "+message.TopicRule)
	}
	if req.DelayLevel > int32(len(b.delays)) || req.MaxReconsumeTimes < 0 {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("delay level must be at most %d", len(b.delays)))
	}
	if err := b.requireMaster(); err != nil {
		return nil, err
	}
	group, off, err := message.ParseID(req.MsgId)
	if err != nil {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, err.Error())
	}
	if group != b.cfg.Group {
		return nil, statusError(codes.NotFound, pb.ErrorReason_MESSAGE_NOT_FOUND, "message "+req.MsgId+" is not on "+b.cfg.Group, nil)
	}
	raw, err := b.store.ReadMessage(off)
	if err != nil {
		return nil, storeError(err)
	}
	r, err := message.Decode(raw)
	if err != nil {
		return nil, storeError(err)
	}
	props := message.CopyProperties(r.Properties, 4)
	times, _ := strconv.Atoi(props[message.PropertyReconsumeTimes])
	times++
	props[message.PropertyReconsumeTimes] = strconv.Itoa(times)
	if props[message.PropertyRetryTopic] == "" {
		props[message.PropertyRetryTopic] = r.Topic
	}
	if props[message.PropertyOriginMsgID] == "" {
		props[message.PropertyOriginMsgID] = req.MsgId
	}
	maxTimes := req.MaxReconsumeTimes
	if g := b.meta.group(req.ConsumerGroup); maxTimes == 0 && g != nil {
		maxTimes = g.RetryMaxTimes
	}
	if maxTimes == 0 {
		maxTimes = b.cfg.MaxReconsumeTimes
	}
	m := message.Message{Flag: r.Flag, Tags: r.Tags, Keys: r.Keys, Properties: props, Body: r.Body, BornTime: r.BornTime}
	if times > int(maxTimes) || req.DelayLevel < 0 {
		m.Topic = message.DLQTopic(req.ConsumerGroup)
		// Neither readable nor writable, as RocketMQ's: the broker writes
		// dead letters itself, and only raftmq dlq resend reads them.
		if err := s.b.ensureSystemTopic(ctx, m.Topic, 0); err != nil {
			return nil, err
		}
	} else {
		if err := s.b.ensureSystemTopic(ctx, message.RetryTopic(req.ConsumerGroup), message.PermRead|message.PermWrite); err != nil {
			return nil, err
		}
		level := req.DelayLevel
		if level == 0 {
			level = min(int32(2+times), int32(len(b.delays)))
		}
		props[message.PropertyRealTopic], props[message.PropertyRealQueue], props[message.PropertyDelayLevel] = message.RetryTopic(req.ConsumerGroup), "0", strconv.Itoa(int(level))
		m.Topic, m.QueueID = message.ScheduleTopic, level-1
	}
	record, err := b.store.EncodeRecord(nil, &m)
	if err != nil {
		return nil, storeError(err)
	}
	sctx, cancel := context.WithTimeout(ctx, b.cfg.SendTimeout)
	defer cancel()
	if _, err := b.batcher.submit(sctx, record, 1, sendSeq{}); err != nil {
		return nil, err
	}
	return &pb.ConsumerSendBackResponse{}, nil
}
