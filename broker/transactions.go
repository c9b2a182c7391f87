package broker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/remoting"
	"github.com/raftmq/raftmq/storage"
)

// Transactional messages, as RocketMQ users send them: a producer sends a
// half message (TRAN_MSG=true, PGROUP its producer group), runs its local
// transaction, then commits or rolls the half back (EndTransaction). A
// half is stored at once, in the half topic's one queue, where no consumer
// reads it; a commit stores the message in its topic and queue, a rollback
// only ends the half. A half left open past TransactionTimeout is checked
// back: the master asks a producer of its group, on a check-back stream the
// producer keeps open (checkstreams.go), what became of it, every
// TransactionCheckInterval, and rolls it back after TransactionCheckMax
// checks, storing a copy in TRANS_CHECK_MAX_TIME_TOPIC for operators.
//
// Every end and every check count is a Raft entry (TransactionUpdate)
// that the state machine applies only to a half still open (halftable.go):
// an end proposed again after an unknown outcome stores its message once, a
// late end cannot undo the first, and a new master knows which halves are
// open and how often each was checked. A commit's message is in the same
// entry as the end, so it is stored exactly when the half ends.
//
// What RocketMQ does differently, and why (the rocketmq5-messages note,
// B and D.2): its ends are "op" messages in another topic read back by the
// check service, which re-checks ended halves, can commit one twice, and
// rewrites a half on every check; here the state is explicit and a check
// writes a few bytes. Ages are the master's store times, not the client's
// born time. Check-backs go over a gRPC stream, not RocketMQ's connection
// from producer heartbeats.

// holdSend turns m, as a producer sent it, into the copy the broker holds
// back: a half message into the half topic, a delayed one into the
// schedule topic (timers.go). m is left as it is when neither.
func (b *Broker) holdSend(m *message.Message, now time.Time) error {
	if m.Properties[message.PropertyTransactionPrepared] != "true" {
		_, err := b.scheduleSend(m, now)
		return err
	}
	group := m.Properties[message.PropertyProducerGroup]
	if !validName(group) {
		return fmt.Errorf("a half message (%s=true) needs property %s, its producer group, matching %s",
			message.PropertyTransactionPrepared, message.PropertyProducerGroup, message.TopicRule)
	}
	props := message.CopyProperties(m.Properties, 3)
	props[message.PropertyRealTopic], props[message.PropertyRealQueue] = m.Topic, strconv.Itoa(int(m.QueueID))
	if key := props[message.PropertyUniqKey]; key != "" {
		props[message.PropertyTransactionID] = key
	}
	m.Topic, m.QueueID, m.Properties = message.TransHalfTopic, 0, props
	return nil
}

// EndTransaction commits or rolls back a half message.
func (s *service) EndTransaction(ctx context.Context, req *pb.EndTransactionRequest) (*pb.EndTransactionResponse, error) {
	return s.b.endTransaction(ctx, req)
}

// endTransaction ends a half as req asks, through Raft, and answers with its
// outcome: req's, or for a half that ended already the same way, the first
// end's. TRANSACTION_UNKNOWN changes nothing (the half waits for a
// check-back).
func (b *Broker) endTransaction(ctx context.Context, req *pb.EndTransactionRequest) (*pb.EndTransactionResponse, error) {
	if err := b.requireMaster(); err != nil {
		return nil, err
	}
	switch req.Outcome {
	case pb.TransactionOutcome_TRANSACTION_UNKNOWN:
		return &pb.EndTransactionResponse{Outcome: req.Outcome}, nil
	case pb.TransactionOutcome_TRANSACTION_COMMIT, pb.TransactionOutcome_TRANSACTION_ROLLBACK:
	default:
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("outcome %v is not commit, rollback or unknown", req.Outcome))
	}
	half, err := b.readHalf(req.MsgId)
	if err != nil {
		return nil, err
	}
	switch {
	case half.Properties[message.PropertyProducerGroup] != req.ProducerGroup:
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("half %s is of producer group %q, not %q", req.MsgId, half.Properties[message.PropertyProducerGroup], req.ProducerGroup))
	case half.Properties[message.PropertyRealTopic] != req.Topic:
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("half %s was sent to topic %q, not %q", req.MsgId, half.Properties[message.PropertyRealTopic], req.Topic))
	}
	if resp, done, err := b.endedAlready(half, req.Outcome); done {
		return resp, err
	}
	now := time.Now()
	end := &pb.TransactionEnd{HalfOffset: half.QueueOffset, Outcome: req.Outcome}
	if req.Outcome == pb.TransactionOutcome_TRANSACTION_COMMIT {
		if end.Records, err = b.committedRecord(half, now); err != nil {
			return nil, err
		}
	}
	r, err := b.propose(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_Transactions{Transactions: &pb.TransactionUpdate{
		StoreTimestamp: now.UnixMilli(), Ends: []*pb.TransactionEnd{end}}}})
	if err != nil {
		return nil, err
	}
	if len(r.ended) == 0 || !r.ended[0] {
		// Another end of the same half came first.
		if resp, done, err := b.endedAlready(half, req.Outcome); done {
			return resp, err
		}
		return nil, statusError(codes.Aborted, pb.ErrorReason_ERROR_REASON_UNSPECIFIED, "the end of half "+req.MsgId+" did not apply; try again", nil)
	}
	b.metrics.transactionEnds.WithLabelValues(outcomeLabel(req.Outcome)).Inc()
	resp := &pb.EndTransactionResponse{Outcome: req.Outcome}
	if len(r.results) > 0 {
		resp.Committed = b.sendResult(r.results[0])
	}
	return resp, nil
}

// readHalf reads the half message with id msgID from the store.
func (b *Broker) readHalf(msgID string) (message.Record, error) {
	group, off, err := message.ParseID(msgID)
	if err != nil {
		return message.Record{}, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, err.Error())
	}
	if group != b.cfg.Group {
		return message.Record{}, statusError(codes.NotFound, pb.ErrorReason_MESSAGE_NOT_FOUND, "message "+msgID+" is not on "+b.cfg.Group, nil)
	}
	raw, err := b.store.ReadMessage(off)
	if err != nil {
		return message.Record{}, storeError(err)
	}
	r, err := message.Decode(raw)
	if err != nil {
		return message.Record{}, storeError(err)
	}
	if r.Topic != message.TransHalfTopic {
		return message.Record{}, statusError(codes.NotFound, pb.ErrorReason_MESSAGE_NOT_FOUND, "message "+msgID+" is not a half message", nil)
	}
	return r, nil
}

// endedAlready answers an end of a half that has ended: with its outcome
// when it is the one asked, with TRANSACTION_ENDED when it is the other or
// no longer known. done is false while the half is open.
func (b *Broker) endedAlready(half message.Record, asked pb.TransactionOutcome) (resp *pb.EndTransactionResponse, done bool, err error) {
	st, known := b.meta.halves.state(half.QueueOffset)
	id := message.FormatID(b.cfg.Group, half.Offset)
	switch {
	case !known:
		return nil, true, statusError(codes.FailedPrecondition, pb.ErrorReason_TRANSACTION_ENDED, "half "+id+" ended long ago; its outcome is no longer kept", nil)
	case st.Outcome == pb.TransactionOutcome_TRANSACTION_UNKNOWN:
		return nil, false, nil
	case st.Outcome != asked:
		return nil, true, statusError(codes.FailedPrecondition, pb.ErrorReason_TRANSACTION_ENDED,
			fmt.Sprintf("half %s ended already: %s", id, outcomeLabel(st.Outcome)), nil)
	}
	resp = &pb.EndTransactionResponse{Outcome: st.Outcome}
	if st.Outcome == pb.TransactionOutcome_TRANSACTION_COMMIT {
		resp.Committed = b.committedResult(half)
	}
	return resp, true, nil
}

// committedResult finds the message a half's commit stored, for a commit
// asked again (a producer's retry after it lost the answer): by the unique
// key the commit kept, in the half's topic, stored after the half. nil
// when it is not found: the half had no key, the commit asked for a delay
// (its copy waits in the schedule topic), or retention removed it.
func (b *Broker) committedResult(half message.Record) *pb.SendResult {
	key, topic := half.Properties[message.PropertyUniqKey], half.Properties[message.PropertyRealTopic]
	if key == "" {
		return nil
	}
	// The master's clock stamps both; a minute's slack covers a clock
	// stepped back between the commit and now.
	stored, ok := b.store.StoredWithKey(topic, key, half.StoreTime, time.Now().Add(time.Minute).UnixMilli())
	if !ok {
		return nil
	}
	return b.sendResult(stored)
}

// committedRecord is a half's message as a commit stores it: in its topic
// and queue (or held again, if it asks for a delay), without the half's
// marks, its store time stamped now.
func (b *Broker) committedRecord(half message.Record, now time.Time) ([]byte, error) {
	props := message.CopyProperties(half.Properties, 0)
	topic, qid := props[message.PropertyRealTopic], props[message.PropertyRealQueue]
	delete(props, message.PropertyRealTopic)
	delete(props, message.PropertyRealQueue)
	delete(props, message.PropertyTransactionPrepared)
	id, err := strconv.Atoi(qid)
	if err != nil || id < 0 || !message.ValidTopic(topic) {
		return nil, storeError(fmt.Errorf("half at queue offset %d has no destination (%s=%q %s=%q)", half.QueueOffset,
			message.PropertyRealTopic, topic, message.PropertyRealQueue, qid))
	}
	m := message.Message{Topic: topic, QueueID: int32(id), Flag: half.Flag, Tags: half.Tags, Keys: half.Keys,
		Properties: props, Body: half.Body, BornTime: half.BornTime}
	if err := b.holdSend(&m, now); err != nil {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, err.Error())
	}
	return b.stampedRecord(&m, now)
}

// stampedRecord encodes m with its store time set to now.
func (b *Broker) stampedRecord(m *message.Message, now time.Time) ([]byte, error) {
	rec, err := b.store.EncodeRecord(nil, m)
	if err == nil {
		err = message.SetStoreTime(rec, now.UnixMilli())
	}
	if err != nil {
		return nil, storeError(err)
	}
	return rec, nil
}

func outcomeLabel(o pb.TransactionOutcome) string {
	switch o {
	case pb.TransactionOutcome_TRANSACTION_COMMIT:
		return "commit"
	case pb.TransactionOutcome_TRANSACTION_ROLLBACK:
		return "rollback"
	}
	return "unknown"
}

// Bounds of one pass of the check service: halves read from the cursor,
// and check-backs made.
const (
	checkScanMax  = 4096
	checkBatchMax = 256
)

// transactionCheckLoop checks back halves left open while this replica is
// master, a pass each tenth of the shorter of the timeout and the check
// interval (600 ms by default): a check is that much late at most, and
// a pass over thousands of open halves, each read from the store, is not
// made every schedule interval.
func (b *Broker) transactionCheckLoop(ctx context.Context) {
	every(ctx, max(b.cfg.ScheduleInterval, min(b.cfg.TransactionTimeout, b.cfg.TransactionCheckInterval)/10), func(now time.Time) {
		if !b.master.Load() || b.gate.paused() {
			return
		}
		if err := b.checkHalves(ctx, now); err != nil && ctx.Err() == nil {
			b.log.Warn("transaction check-back failed", "err", err)
		}
	})
}

// checkHalves makes one pass over the open halves, from the cursor: a half
// open past the timeout and not checked within the interval is checked back,
// or rolled back after the last check. The halves are in store order, so
// the pass stops at the first too young to check.
func (b *Broker) checkHalves(ctx context.Context, now time.Time) error {
	cursor := b.meta.halves.position()
	_, end := b.store.QueueOffsets(message.TransHalfTopic, 0)
	update := &pb.TransactionUpdate{StoreTimestamp: now.UnixMilli()}
	var halves []halfCheck // the half of each end
	var rolled, size int   // size: the bytes of the check-max copies, within half an entry
	full := func() bool { return len(update.Ends) >= checkBatchMax || size >= b.cfg.EntryMaxBytes/2 }
	for off := cursor; off < end && off-cursor < checkScanMax && !full(); {
		res, err := b.store.GetMessages(storage.GetRequest{Topic: message.TransHalfTopic, QueueID: 0, Offset: off,
			MaxMessages: checkBatchMax, MaxBytes: b.cfg.EntryMaxBytes / 2})
		if err != nil {
			return err
		}
		if res.Status == storage.OffsetTooSmall {
			b.log.Warn("transaction check-back: open half messages deleted by retention; they count as rolled back",
				"from", off, "to", res.NextOffset)
			update.ExpireBelow = res.NextOffset
			off = res.NextOffset
			continue
		}
		if len(res.Records) == 0 {
			break
		}
		young := false
		for _, raw := range res.Records {
			r, err := message.Decode(raw)
			if err != nil {
				return err
			}
			off = r.QueueOffset + 1
			st, _ := b.meta.halves.state(r.QueueOffset)
			if st.Outcome != pb.TransactionOutcome_TRANSACTION_UNKNOWN {
				continue
			}
			if now.Sub(time.UnixMilli(r.StoreTime)) < b.cfg.TransactionTimeout {
				young = true
				break
			}
			if st.CheckTimes > 0 && now.Sub(time.UnixMilli(st.CheckedAt)) < b.cfg.TransactionCheckInterval {
				continue
			}
			e, err := b.nextCheck(r, st.CheckTimes, now)
			if err != nil {
				return err
			}
			update.Ends, halves = append(update.Ends, e), append(halves, halfCheck{record: r, times: e.CheckTimes})
			size += len(e.Records)
			if e.Outcome == pb.TransactionOutcome_TRANSACTION_ROLLBACK {
				rolled++
			}
			if full() {
				break
			}
		}
		if young {
			break
		}
	}
	if len(update.Ends) == 0 && update.ExpireBelow == 0 {
		return nil
	}
	if rolled > 0 {
		if err := b.ensureSystemTopic(ctx, message.TransCheckMaxTopic, message.PermRead); err != nil {
			return err
		}
	}
	r, err := b.propose(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_Transactions{Transactions: update}})
	if err != nil {
		return err
	}
	if update.ExpireBelow > cursor {
		b.metrics.transactionEnds.WithLabelValues("expired").Add(float64(update.ExpireBelow - cursor))
	}
	for i, e := range update.Ends {
		switch {
		case !r.ended[i]: // ended meanwhile
		case e.Outcome == pb.TransactionOutcome_TRANSACTION_ROLLBACK:
			b.metrics.transactionEnds.WithLabelValues("check_max").Inc()
		default:
			b.sendCheck(halves[i])
		}
	}
	return nil
}

// halfCheck is a half and its check count, for the check-back sent once
// the count is applied.
type halfCheck struct {
	record message.Record
	times  int32
}

// nextCheck is the update for a half due a check-back: its count, or, past
// the last, its rollback with a copy for operators.
func (b *Broker) nextCheck(r message.Record, checked int32, now time.Time) (*pb.TransactionEnd, error) {
	e := &pb.TransactionEnd{HalfOffset: r.QueueOffset, CheckTimes: checked + 1}
	if checked < b.cfg.TransactionCheckMax {
		return e, nil
	}
	e.Outcome, e.CheckTimes = pb.TransactionOutcome_TRANSACTION_ROLLBACK, checked
	props := message.CopyProperties(r.Properties, 2)
	props[message.PropertyTransactionCheckTimes] = strconv.Itoa(int(checked))
	props[message.PropertyOriginMsgID] = message.FormatID(b.cfg.Group, r.Offset)
	m := message.Message{Topic: message.TransCheckMaxTopic, Flag: r.Flag, Tags: r.Tags, Keys: r.Keys,
		Properties: props, Body: r.Body, BornTime: r.BornTime}
	var err error
	e.Records, err = b.stampedRecord(&m, now)
	return e, err
}

// sendCheck asks a producer of the half's group about the half: one with a
// check-back stream to this master that named the half's topic, else a
// RocketMQ client that heartbeats here as a producer of the group and may
// publish to the topic (code 39 on its connection).
func (b *Broker) sendCheck(c halfCheck) {
	r := c.record
	group, topic := r.Properties[message.PropertyProducerGroup], r.Properties[message.PropertyRealTopic]
	qid, _ := strconv.Atoi(r.Properties[message.PropertyRealQueue])
	props := message.CopyProperties(r.Properties, 0)
	delete(props, message.PropertyRealTopic)
	delete(props, message.PropertyRealQueue)
	check := &pb.TransactionCheck{
		MsgId:          message.FormatID(b.cfg.Group, r.Offset),
		Message:        &pb.Message{Topic: topic, Tags: r.Tags, Keys: r.Keys, Properties: props, Body: r.Body, Flag: r.Flag, BornTimestamp: r.BornTime},
		QueueId:        int32(qid),
		CheckTimes:     c.times,
		StoreTimestamp: r.StoreTime,
	}
	if b.checkStreams.send(group, topic, check) || b.clientConns.pushToProducer(group, b.mayEnd(topic), b.remotingCheck(r, topic, int32(qid), props)) {
		b.metrics.transactionChecks.WithLabelValues("sent").Inc()
		return
	}
	b.metrics.transactionChecks.WithLabelValues("no_producer").Inc()
	b.log.Info("transaction check-back: no producer of the half's group is connected; counted all the same",
		"producer_group", group, "topic", topic, "half", check.MsgId, "check_times", c.times)
}

// ensureSystemTopic creates a one-queue topic the broker writes itself
// (retry, dead letters, check-max) with perm on first use.
func (b *Broker) ensureSystemTopic(ctx context.Context, name string, perm int32) error {
	if b.meta.topic(name) != nil {
		return nil
	}
	t := &pb.TopicConfig{Name: name, ReadQueues: 1, WriteQueues: 1, Perm: perm}
	return b.apply(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_UpsertTopic{UpsertTopic: t}})
}

// remotingCheck is the check-back of half r, sent to topic@queue with
// props, as RocketMQ's clients take it (CHECK_TRANSACTION_STATE).
func (b *Broker) remotingCheck(r message.Record, topic string, queue int32, props map[string]string) *remoting.Command {
	host, port := b.storeHost()
	asSent := r
	asSent.Topic, asSent.QueueID, asSent.Properties = topic, queue, props
	key := props[message.PropertyUniqKey]
	return remoting.CheckTransactionState(r.Offset, r.QueueOffset, key, remoting.OffsetMsgID(host, port, r.Offset),
		remoting.AppendStored(nil, &asSent, host, port))
}

// mayEnd is whether a RocketMQ client's caller may end a half of topic
// (access control's rule for EndTransaction).
func (b *Broker) mayEnd(topic string) func(remotingCaller) bool {
	return func(c remotingCaller) bool {
		acl := b.cfg.ACL
		return acl == nil || acl.CheckCall(c.id, c.known, brokerAccess, pb.Broker_EndTransaction_FullMethodName, &pb.EndTransactionRequest{Topic: topic}) == nil
	}
}
