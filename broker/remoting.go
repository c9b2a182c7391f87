package broker

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/remoting"
	"google.golang.org/grpc/status"
)

// RocketMQ's clients call a replica over the remoting protocol, on its
// gRPC port (remoting.Demux): the gateway turns each request into the
// native call (SendMessage, Heartbeat, GetConsumerList, PullMessage and
// the offset RPCs), so it takes the same path, checks and limits, and
// answers in RocketMQ's terms: sends (codes 10, 310, 320), heartbeats
// (34), the member list (38), pulls (11, long-polled, with the offset
// they commit), offsets (14, 15, 29, 30, 31), send-back (36, through the
// native retry path; the master creates a clustering group's retry topic
// on its heartbeat), queue locks for orderly consumers (41, 42, the
// native locks). The members-changed push (40) is clientconns.go's.

// Remoting answer codes of RocketMQ's ResponseCode that sends use.
const (
	remotingMessageIllegal      = 13
	remotingServiceNotAvailable = 14
	remotingNoPermission        = 16
)

func (b *Broker) remotingHandlers() map[int32]remoting.Handler {
	handlers := b.remotingGateway()
	for code, h := range handlers {
		handlers[code] = b.refuseRemotingWhenFailed(identifyRemoting(b.cfg.ACL, h))
	}
	return handlers
}

// remotingCallerKey holds a remoting request's caller in its context.
type remotingCallerKey struct{}

type remotingCaller struct {
	id    cluster.Identity
	known bool
}

// identifyRemoting finds who sent a request under access control (its
// connection's client certificate, or RocketMQ's access-key signature),
// for native to check each call the request makes; a signature that does
// not verify is answered at once.
func identifyRemoting(acl *cluster.ACL, h remoting.Handler) remoting.Handler {
	if acl == nil {
		return h
	}
	return func(ctx context.Context, c *remoting.Command) *remoting.Command {
		id, known, err := acl.RemotingCaller(remoting.TLSOf(ctx), c.ExtFields, c.Body)
		if err != nil {
			return remotingError(err)
		}
		return h(context.WithValue(ctx, remotingCallerKey{}, remotingCaller{id, known}), c)
	}
}

// native makes a native call for a remoting request, checked as the gRPC
// interceptors check it (they do not see it): under access control, the
// rule of method in brokerAccess for the request's caller. Every call of
// the gateway goes through it.
func native[Req, Resp any](ctx context.Context, s *service, method string, call func(context.Context, Req) (Resp, error), req Req) (Resp, error) {
	if acl := s.b.cfg.ACL; acl != nil {
		c, _ := ctx.Value(remotingCallerKey{}).(remotingCaller)
		if err := acl.CheckCall(c.id, c.known, brokerAccess, method, req); err != nil {
			var zero Resp
			return zero, err
		}
	}
	return call(ctx, req)
}

// refuseRemotingWhenFailed is refuseUnaryWhenFailed for the gateway (which
// calls the services directly, past the gRPC interceptors): a replica
// whose store failed serves no RocketMQ client either.
func (b *Broker) refuseRemotingWhenFailed(h remoting.Handler) remoting.Handler {
	return func(ctx context.Context, c *remoting.Command) *remoting.Command {
		if err := b.failedError(); err != nil {
			return remotingError(err)
		}
		return h(ctx, c)
	}
}

func (b *Broker) remotingGateway() map[int32]remoting.Handler {
	s := &service{b: b}
	return map[int32]remoting.Handler{
		remoting.CodeSendMessage:         s.remotingSend,
		remoting.CodeSendMessageV2:       s.remotingSend,
		remoting.CodeSendBatchMessage:    s.remotingSend,
		remoting.CodeHeartbeat:           s.remotingHeartbeat,
		remoting.CodeGetConsumerList:     s.remotingConsumerList,
		remoting.CodePullMessage:         s.remotingPull,
		remoting.CodeQueryConsumerOffset: s.remotingQueryOffset,
		remoting.CodeUpdateConsumerOffet: s.remotingUpdateOffset,
		remoting.CodeGetMaxOffset:        s.remotingQueueOffset(false),
		remoting.CodeGetMinOffset:        s.remotingQueueOffset(true),
		remoting.CodeSearchOffsetByTime:  s.remotingSearchOffset,
		remoting.CodeConsumerSendBack:    s.remotingSendBack,
		remoting.CodeLockBatchMQ:         s.remotingLock,
		remoting.CodeUnlockBatchMQ:       s.remotingUnlock,
		remoting.CodeEndTransaction:      s.remotingEndTransaction,
	}
}

// remotingClosed: a RocketMQ client's connection ended.
func (b *Broker) remotingClosed(conn *remoting.Conn) { b.connClosed(conn) }

// connClosed: the consumers that heartbeated on a connection that ended
// leave their groups, whose other members are told (code 40, heartbeat
// and pull answers, held pulls).
func (b *Broker) connClosed(conn pusher) {
	for client, groups := range b.clientConns.closed(conn) {
		b.consumers.unregister(client, groups)
	}
}

// remotingLock takes the queues of a lock body (which may name several
// topics) through the native lock, and answers those now held.
func (s *service) remotingLock(ctx context.Context, c *remoting.Command) *remoting.Command {
	l, err := remoting.ReadLockBatch(c.Body)
	if err != nil {
		return illegal(err)
	}
	var held []remoting.MessageQueue
	for topic, queues := range queuesByTopic(l.Queues) {
		resp, err := native(ctx, s, pb.Broker_LockQueues_FullMethodName, s.LockQueues, &pb.LockQueuesRequest{ConsumerGroup: l.ConsumerGroup, ClientId: l.ClientID, Topic: topic, QueueIds: queues})
		if err != nil {
			return remotingError(err)
		}
		for _, q := range resp.LockedQueueIds {
			held = append(held, remoting.MessageQueue{Topic: topic, BrokerName: s.b.cfg.Group, QueueID: q})
		}
	}
	return &remoting.Command{Code: remoting.CodeSuccess, Body: remoting.LockedBody(held)}
}

func (s *service) remotingUnlock(ctx context.Context, c *remoting.Command) *remoting.Command {
	l, err := remoting.ReadLockBatch(c.Body)
	if err != nil {
		return illegal(err)
	}
	for topic, queues := range queuesByTopic(l.Queues) {
		if _, err := native(ctx, s, pb.Broker_UnlockQueues_FullMethodName, s.UnlockQueues, &pb.UnlockQueuesRequest{ConsumerGroup: l.ConsumerGroup, ClientId: l.ClientID, Topic: topic, QueueIds: queues}); err != nil {
			return remotingError(err)
		}
	}
	return success(nil)
}

func queuesByTopic(mqs []remoting.MessageQueue) map[string][]int32 {
	out := map[string][]int32{}
	for _, q := range mqs {
		out[q.Topic] = append(out[q.Topic], q.QueueID)
	}
	return out
}

// remotingSendBack is the native send-back of the message at the
// commitlog offset the consumer read it at (the stored layout's
// commitlog offset is the record's, on this group).
func (s *service) remotingSendBack(ctx context.Context, c *remoting.Command) *remoting.Command {
	f := c.ExtFields
	off, err := strconv.ParseInt(f["offset"], 10, 64)
	if err != nil {
		return illegal(fmt.Errorf("offset %.20q is not a number", f["offset"]))
	}
	level, _ := strconv.ParseInt(f["delayLevel"], 10, 32)
	maxTimes, _ := strconv.ParseInt(f["maxReconsumeTimes"], 10, 32)
	if _, err := native(ctx, s, pb.Broker_ConsumerSendBack_FullMethodName, s.ConsumerSendBack, &pb.ConsumerSendBackRequest{ConsumerGroup: f["group"], MsgId: message.FormatID(s.b.cfg.Group, off),
		DelayLevel: int32(level), MaxReconsumeTimes: int32(maxTimes)}); err != nil {
		return remotingError(err)
	}
	return success(nil)
}

func remotingError(err error) *remoting.Command {
	return &remoting.Command{Code: remotingCode(err), Remark: boundRemark(err)}
}

func success(ext map[string]string) *remoting.Command {
	return &remoting.Command{Code: remoting.CodeSuccess, ExtFields: ext}
}

// queueOf reads a request's topic and queue id.
func queueOf(c *remoting.Command) (string, int32, error) {
	q, err := strconv.ParseInt(c.ExtFields["queueId"], 10, 32)
	if err != nil {
		return "", 0, fmt.Errorf("queueId %.20q is not a number", c.ExtFields["queueId"])
	}
	return c.ExtFields["topic"], int32(q), nil
}

func illegal(err error) *remoting.Command {
	return &remoting.Command{Code: remotingMessageIllegal, Remark: err.Error()}
}

// remotingHeartbeat registers the client's consumer groups, as a native
// heartbeat does, and its producer groups, for check-backs (code 39).
func (s *service) remotingHeartbeat(ctx context.Context, c *remoting.Command) *remoting.Command {
	client, groups, producers, err := remoting.Heartbeat(c.Body)
	if err != nil {
		return illegal(err)
	}
	if len(groups) == 0 && len(producers) == 0 {
		return success(nil)
	}
	if len(groups) > 0 {
		if _, err := native(ctx, s, pb.Broker_Heartbeat_FullMethodName, s.Heartbeat, &pb.HeartbeatRequest{ClientId: client, Groups: groups}); err != nil {
			return remotingError(err)
		}
	}
	caller, _ := ctx.Value(remotingCallerKey{}).(remotingCaller)
	if conn := remoting.ConnOf(ctx); conn != nil && !s.b.clientConns.heartbeat(conn, client, groups, producers, caller) {
		s.b.consumers.unregister(client, groups)
		return illegal(fmt.Errorf("more than %d client ids heartbeat on one connection", maxClientsPerConn))
	}
	// RocketMQ's clients subscribe to their group's retry topic from the
	// start and learn its route only every 30 s: the master creates it on
	// a clustering group's heartbeat, as RocketMQ's broker does, so the
	// first retry is not held up by a route refresh.
	if s.b.master.Load() {
		for _, g := range groups {
			if g.Mode == pb.ConsumeMode_CLUSTERING && validName(g.Group) {
				if err := s.b.ensureSystemTopic(ctx, message.RetryTopic(g.Group), message.PermRead|message.PermWrite); err != nil {
					s.b.log.Warn("retry topic not created", "group", g.Group, "err", err)
				}
			}
		}
	}
	return success(nil)
}

func (s *service) remotingConsumerList(ctx context.Context, c *remoting.Command) *remoting.Command {
	resp, err := native(ctx, s, pb.Broker_GetConsumerList_FullMethodName, s.GetConsumerList, &pb.GetConsumerListRequest{ConsumerGroup: c.ExtFields["consumerGroup"]})
	if err != nil {
		return remotingError(err)
	}
	return &remoting.Command{Code: remoting.CodeSuccess, Body: remoting.ConsumerListBody(resp.ClientIds)}
}

// remotingPull is a native pull (long-polled when asked, with the
// offset it commits), its records in RocketMQ's stored layout.
func (s *service) remotingPull(ctx context.Context, c *remoting.Command) *remoting.Command {
	f := c.ExtFields
	topic, queue, err := queueOf(c)
	if err != nil {
		return illegal(err)
	}
	num := func(name string) int64 { v, _ := strconv.ParseInt(f[name], 10, 64); return v }
	sysFlag := num("sysFlag")
	req := &pb.PullMessageRequest{ConsumerGroup: f["consumerGroup"], Topic: topic, QueueId: queue, QueueOffset: num("queueOffset"),
		MaxMessages: int32(num("maxMsgNums")), Subscription: f["subscription"]}
	if sysFlag&remoting.PullSuspend != 0 {
		req.SuspendTimeoutMs = num("suspendTimeoutMillis")
	}
	if sysFlag&remoting.PullCommitOffset != 0 {
		req.CommitOffset = num("commitOffset")
	}
	resp, err := native(ctx, s, pb.Broker_PullMessage_FullMethodName, s.PullMessage, req)
	if err != nil {
		return remotingError(err)
	}
	out := success(map[string]string{"nextBeginOffset": strconv.FormatInt(resp.NextBeginOffset, 10),
		"minOffset": strconv.FormatInt(resp.MinOffset, 10), "maxOffset": strconv.FormatInt(resp.MaxOffset, 10),
		"suggestWhichBrokerId": strconv.Itoa(int(s.b.routeBrokerID(resp.SuggestReplicaId)))})
	switch resp.Status {
	case pb.PullStatus_PULL_FOUND:
	case pb.PullStatus_PULL_NO_MATCHED_MESSAGE:
		out.Code = remoting.CodePullRetryImmediately
	case pb.PullStatus_PULL_OFFSET_MOVED:
		out.Code = remoting.CodePullOffsetMoved
	default:
		out.Code = remoting.CodePullNotFound
	}
	host, port := s.b.storeHost()
	for _, raw := range resp.Records {
		r, err := message.Decode(raw)
		if err != nil {
			return remotingError(err)
		}
		out.Body = remoting.AppendStored(out.Body, &r, host, port)
	}
	return out
}

// routeBrokerID is the broker id RocketMQ's routes give replica id (the
// master is 0, a slave its replica id; remoting.RouteJSON): a pull's
// suggestion of the replica to pull from next, in the client's terms (no
// suggestion is the master too).
func (b *Broker) routeBrokerID(replica int32) int32 {
	if master, _ := b.leaderInfo(); replica <= 0 || replica == master {
		return 0
	}
	return replica
}

// storeHost is this replica's address in the stored layout's host fields
// (its advertised IPv4 address, or zeros for a name).
func (b *Broker) storeHost() ([4]byte, int32) {
	var ip [4]byte
	host, portStr, _ := net.SplitHostPort(b.cfg.AdvertiseGRPC)
	if v4 := net.ParseIP(host).To4(); v4 != nil {
		copy(ip[:], v4)
	}
	port, _ := strconv.Atoi(portStr)
	return ip, int32(port)
}

func (s *service) remotingQueryOffset(ctx context.Context, c *remoting.Command) *remoting.Command {
	topic, queue, err := queueOf(c)
	if err != nil {
		return illegal(err)
	}
	resp, err := native(ctx, s, pb.Broker_QueryConsumerOffset_FullMethodName, s.remotingOffsetOf, &pb.QueryConsumerOffsetRequest{ConsumerGroup: c.ExtFields["consumerGroup"], Topic: topic, QueueId: queue,
		// RocketMQ 5's header field; absent (its clients): true.
		ZeroIfYoung: c.ExtFields["setZeroIfNotFound"] != "false"})
	if err != nil {
		return remotingError(err)
	}
	if resp.Offset < 0 {
		return &remoting.Command{Code: remoting.CodeQueryNotFound, Remark: "no offset committed"}
	}
	return success(map[string]string{"offset": strconv.FormatInt(resp.Offset, 10)})
}

// remotingOffsetOf answers RocketMQ's offset query on the master, and on a
// slave that is caught up: RocketMQ's clients ask the master of the route
// they last polled (every 30 s), and take any answer but "none" as a
// failure that leaves the queue unconsumed until their next rebalance, so
// a caught-up slave answering spares them that wait. One behind (just
// restarted, replaying) is refused: its offsets are stale
// (QueryConsumerOffset says what that costs).
func (s *service) remotingOffsetOf(ctx context.Context, req *pb.QueryConsumerOffsetRequest) (*pb.QueryConsumerOffsetResponse, error) {
	if !s.b.master.Load() && s.b.caughtUp() {
		if !validName(req.ConsumerGroup) || !validName(req.Topic) {
			return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, "group and topic names must match "+message.TopicRule)
		}
		return &pb.QueryConsumerOffsetResponse{Offset: s.b.committedOffset(req)}, nil
	}
	return s.QueryConsumerOffset(ctx, req)
}

func (s *service) remotingUpdateOffset(ctx context.Context, c *remoting.Command) *remoting.Command {
	topic, queue, err := queueOf(c)
	if err != nil {
		return illegal(err)
	}
	off, err := strconv.ParseInt(c.ExtFields["commitOffset"], 10, 64)
	if err != nil {
		return illegal(fmt.Errorf("commitOffset %.20q is not a number", c.ExtFields["commitOffset"]))
	}
	if _, err := native(ctx, s, pb.Broker_UpdateConsumerOffset_FullMethodName, s.UpdateConsumerOffset, &pb.UpdateConsumerOffsetRequest{ConsumerGroup: c.ExtFields["consumerGroup"],
		Offsets: []*pb.QueueOffset{{Topic: topic, QueueId: queue, Offset: off}}}); err != nil {
		return remotingError(err)
	}
	return success(nil)
}

// remotingQueueOffset answers a queue's first (min) or end offset.
func (s *service) remotingQueueOffset(min bool) remoting.Handler {
	return func(ctx context.Context, c *remoting.Command) *remoting.Command {
		topic, queue, err := queueOf(c)
		if err != nil {
			return illegal(err)
		}
		resp, err := native(ctx, s, pb.Broker_GetQueueOffsets_FullMethodName, s.GetQueueOffsets, &pb.GetQueueOffsetsRequest{Topic: topic, QueueId: queue})
		if err != nil {
			return remotingError(err)
		}
		off := resp.MaxOffset
		if min {
			off = resp.MinOffset
		}
		return success(map[string]string{"offset": strconv.FormatInt(off, 10)})
	}
}

func (s *service) remotingSearchOffset(ctx context.Context, c *remoting.Command) *remoting.Command {
	topic, queue, err := queueOf(c)
	if err != nil {
		return illegal(err)
	}
	ts, _ := strconv.ParseInt(c.ExtFields["timestamp"], 10, 64)
	resp, err := native(ctx, s, pb.Broker_SearchOffsetByTime_FullMethodName, s.SearchOffsetByTime, &pb.SearchOffsetByTimeRequest{Topic: topic, QueueId: queue, Timestamp: ts})
	if err != nil {
		return remotingError(err)
	}
	return success(map[string]string{"offset": strconv.FormatInt(resp.Offset, 10)})
}

func (s *service) remotingSend(ctx context.Context, c *remoting.Command) *remoting.Command {
	req, err := remoting.SendRequest(c, s.b.cfg.MaxMessageSize)
	if err != nil {
		return &remoting.Command{Code: remotingMessageIllegal, Remark: err.Error()}
	}
	resp, err := native(ctx, s, pb.Broker_SendMessage_FullMethodName, s.SendMessage, req)
	if err != nil {
		return remotingError(err)
	}
	ids := make([]string, len(resp.Results))
	for i, r := range resp.Results {
		ids[i] = r.MsgId
	}
	out := &remoting.Command{Code: remoting.CodeSuccess, ExtFields: map[string]string{
		"msgId": strings.Join(ids, ","), "queueId": strconv.Itoa(int(resp.QueueId)),
		"queueOffset": strconv.FormatInt(resp.Results[0].QueueOffset, 10), "MSG_REGION": "DefaultRegion", "TRACE_ON": "false",
	}}
	if m := req.Messages; len(m) == 1 && m[0].Properties[message.PropertyTransactionPrepared] == "true" {
		// A half: the client ends it by the commitlog offset it decodes
		// from an offset message id (the Go client's endTransaction), and
		// names it by its unique key.
		host, port := s.b.storeHost()
		out.ExtFields["msgId"] = remoting.OffsetMsgID(host, port, resp.Results[0].CommitlogOffset)
		out.ExtFields["transactionId"] = m[0].Properties[message.PropertyUniqKey]
	}
	return out
}

// remotingEndTransaction is the native end of the half at the request's
// commitlog offset. It comes one-way: a refusal is logged, and the half is
// left to a check-back.
func (s *service) remotingEndTransaction(ctx context.Context, c *remoting.Command) *remoting.Command {
	// Access control decides by the half's topic, read from the store:
	// only for a caller it knows.
	if acl := s.b.cfg.ACL; acl != nil {
		if caller, _ := ctx.Value(remotingCallerKey{}).(remotingCaller); !caller.known {
			return remotingError(acl.Check(caller.id, false, cluster.Access{}))
		}
	}
	e, err := remoting.ReadEndTransaction(c)
	if err != nil {
		return illegal(err)
	}
	req := &pb.EndTransactionRequest{ProducerGroup: e.ProducerGroup, MsgId: message.FormatID(s.b.cfg.Group, e.CommitLogOffset), FromCheck: e.FromCheck}
	switch e.CommitOrRollback {
	case remoting.TransactionCommitType:
		req.Outcome = pb.TransactionOutcome_TRANSACTION_COMMIT
	case remoting.TransactionRollbackType:
		req.Outcome = pb.TransactionOutcome_TRANSACTION_ROLLBACK
	default:
		return success(nil) // not known yet: the check-back asks
	}
	// RocketMQ's header has no topic: the half's, for access control.
	if err := s.b.requireMaster(); err != nil {
		return remotingError(err)
	}
	half, err := s.b.readHalf(req.MsgId)
	if err != nil {
		return remotingError(err)
	}
	req.Topic = half.Properties[message.PropertyRealTopic]
	if _, err := native(ctx, s, pb.Broker_EndTransaction_FullMethodName, s.EndTransaction, req); err != nil {
		s.b.log.Info("RocketMQ client's end of a transaction refused", "producer_group", req.ProducerGroup, "half", req.MsgId, "err", err)
		return remotingError(err)
	}
	return success(nil)
}

// remotingCode is a native error's RocketMQ answer code. A producer
// retries a send answered 1, 14, 16 or 17 (the Go client's
// needRetryCode): a replica that is not the master answers 14, as
// RocketMQ's slaves do ("service not available"), and the remark names
// the master when it is known.
func remotingCode(err error) int32 {
	switch reason, _ := pb.ReasonOf(err); reason {
	case pb.ErrorReason_TOPIC_NOT_FOUND:
		return remoting.CodeTopicNotExist
	case pb.ErrorReason_ILLEGAL_ARGUMENT, pb.ErrorReason_ILLEGAL_NAME, pb.ErrorReason_MESSAGE_TOO_LARGE:
		return remotingMessageIllegal
	case pb.ErrorReason_NO_PERMISSION:
		return remotingNoPermission
	case pb.ErrorReason_NOT_LEADER, pb.ErrorReason_WRITES_PAUSED:
		// A store that takes no writes now: RocketMQ's clients send to
		// another broker (as from a slave's answer).
		return remotingServiceNotAvailable
	default:
		return remoting.CodeSystemError
	}
}

// boundRemark is an error's message for a remark: the status's message
// (with the master's address, which a native answer carries apart), cut
// as the native answers are.
func boundRemark(err error) string {
	msg := status.Convert(err).Message()
	if reason, meta := pb.ReasonOf(err); reason == pb.ErrorReason_NOT_LEADER && meta["leader"] != "" {
		msg += "; the master is " + meta["leader"]
	}
	return cluster.BoundMessage(msg)
}
