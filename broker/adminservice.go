package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

// Metadata changes go through Raft on the master; reads are served by any
// replica from its applied state.

func (s *service) CreateTopic(ctx context.Context, req *pb.CreateTopicRequest) (*pb.CreateTopicResponse, error) {
	b := s.b
	t := req.Topic
	if t == nil || !validName(t.Name) || message.Reserved(t.Name) {
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, "topic name must match "+message.TopicRule+" and not be the broker's own ("+message.ScheduleTopic+", "+message.TransHalfTopic+", "+message.TransCheckMaxTopic+")")
	}
	if t.ReadQueues < 1 || t.WriteQueues < 1 || t.ReadQueues > b.cfg.MaxQueues || t.WriteQueues > b.cfg.MaxQueues {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("queue counts must be in [1, %d]", b.cfg.MaxQueues))
	}
	if t.Perm == 0 {
		t.Perm = message.PermRead | message.PermWrite
	}
	if t.Perm&^(message.PermRead|message.PermWrite) != 0 {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "perm is a sum of 4 (read) and 2 (write)")
	}
	if err := b.requireMaster(); err != nil {
		return nil, err
	}
	if !req.Update && b.meta.topic(t.Name) != nil {
		return nil, statusError(codes.AlreadyExists, pb.ErrorReason_TOPIC_EXISTS, "topic "+t.Name+" exists", nil)
	}
	if err := b.apply(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_UpsertTopic{UpsertTopic: t}}); err != nil {
		return nil, err
	}
	return &pb.CreateTopicResponse{}, nil
}

func (s *service) DeleteTopic(ctx context.Context, req *pb.DeleteTopicRequest) (*pb.DeleteTopicResponse, error) {
	b := s.b
	if !validName(req.Name) {
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, "topic name must match "+message.TopicRule)
	}
	if err := b.requireMaster(); err != nil {
		return nil, err
	}
	if b.meta.topic(req.Name) == nil {
		return nil, statusError(codes.NotFound, pb.ErrorReason_TOPIC_NOT_FOUND, "topic "+req.Name+" does not exist", nil)
	}
	if err := b.apply(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_DeleteTopic{DeleteTopic: req.Name}}); err != nil {
		return nil, err
	}
	return &pb.DeleteTopicResponse{}, nil
}

func (s *service) ListTopics(context.Context, *pb.ListTopicsRequest) (*pb.ListTopicsResponse, error) {
	topics, version := s.b.meta.topicList()
	return &pb.ListTopicsResponse{Topics: topics, Version: version}, nil
}

func (s *service) UpsertSubscriptionGroup(ctx context.Context, req *pb.UpsertSubscriptionGroupRequest) (*pb.UpsertSubscriptionGroupResponse, error) {
	g := req.Group
	if g == nil || !validName(g.Name) {
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, "group name must match "+message.TopicRule)
	}
	if g.RetryMaxTimes < 0 || g.RetryQueues < 0 || g.RetryQueues > s.b.cfg.MaxQueues {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "retry settings out of range")
	}
	if err := s.b.requireMaster(); err != nil {
		return nil, err
	}
	if err := s.b.apply(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_UpsertGroup{UpsertGroup: g}}); err != nil {
		return nil, err
	}
	return &pb.UpsertSubscriptionGroupResponse{}, nil
}

func (s *service) DeleteSubscriptionGroup(ctx context.Context, req *pb.DeleteSubscriptionGroupRequest) (*pb.DeleteSubscriptionGroupResponse, error) {
	if !validName(req.Name) {
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, "group name must match "+message.TopicRule)
	}
	if err := s.b.requireMaster(); err != nil {
		return nil, err
	}
	if s.b.meta.group(req.Name) == nil {
		return nil, statusError(codes.NotFound, pb.ErrorReason_GROUP_NOT_FOUND, "group "+req.Name+" does not exist", nil)
	}
	if err := s.b.apply(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_DeleteGroup{DeleteGroup: req.Name}}); err != nil {
		return nil, err
	}
	return &pb.DeleteSubscriptionGroupResponse{}, nil
}

func (s *service) ListSubscriptionGroups(context.Context, *pb.ListSubscriptionGroupsRequest) (*pb.ListSubscriptionGroupsResponse, error) {
	return &pb.ListSubscriptionGroupsResponse{Groups: s.b.meta.groupList()}, nil
}

// QueryConsumerOffset is answered by the master only: a slave's table lags
// it, and a replica just restarted holds its snapshot's offsets until it
// has replayed the log. A consumer that starts a queue from such an offset
// consumes everything after it again (the compose cluster's rolling
// restart drill: 1442 duplicates for 9745 acked messages, CI at fc09a27).
// The master answers with a pull's commit not yet replicated, too.
func (s *service) QueryConsumerOffset(_ context.Context, req *pb.QueryConsumerOffsetRequest) (*pb.QueryConsumerOffsetResponse, error) {
	if !validName(req.ConsumerGroup) || !validName(req.Topic) {
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, "group and topic names must match "+message.TopicRule)
	}
	if err := s.b.requireMaster(); err != nil {
		return nil, err
	}
	return &pb.QueryConsumerOffsetResponse{Offset: s.b.committedOffset(req)}, nil
}

// committedOffset is the group's offset for the queue as this replica
// knows it, a pending commit first; with none, 0 for a young queue when
// the request asks so, else -1.
func (b *Broker) committedOffset(req *pb.QueryConsumerOffsetRequest) int64 {
	if off, ok := b.offsets.pendingOffset(req.ConsumerGroup, req.Topic, req.QueueId); ok {
		return off
	}
	off := b.meta.offset(req.ConsumerGroup, req.Topic, req.QueueId)
	if off < 0 && req.ZeroIfYoung && b.youngQueue(req.Topic, req.QueueId) {
		return 0
	}
	return off
}

// youngQueue reports whether the queue still holds its first message and
// that is among the commitlog's newest YoungQueueBytes: RocketMQ's rule for
// where a group new to a queue starts (Config.YoungQueueBytes).
func (b *Broker) youngQueue(topic string, queue int32) bool {
	if b.cfg.YoungQueueBytes < 0 {
		return false
	}
	pos, ok := b.store.QueueStart(topic, queue)
	if !ok {
		return false
	}
	_, end := b.store.CommitlogOffsets()
	return end-pos <= b.cfg.YoungQueueBytes
}

func (s *service) UpdateConsumerOffset(ctx context.Context, req *pb.UpdateConsumerOffsetRequest) (*pb.UpdateConsumerOffsetResponse, error) {
	if !validName(req.ConsumerGroup) {
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, "group name must match "+message.TopicRule)
	}
	if n := len(req.Offsets); n > s.b.cfg.MaxOffsetsPerCommit {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("%d offsets in one commit, limit %d", n, s.b.cfg.MaxOffsetsPerCommit))
	}
	for _, o := range req.Offsets {
		if o == nil || !validName(o.Topic) || o.QueueId < 0 || o.QueueId >= s.b.cfg.MaxQueues || o.Offset < 0 {
			return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "each offset needs a legal topic, a queue id in range and a non-negative offset")
		}
		// Offsets only for queues that exist: each is kept (replicated,
		// snapshotted) until its group is deleted.
		t := s.b.meta.topic(o.Topic)
		if t == nil {
			return nil, statusError(codes.NotFound, pb.ErrorReason_TOPIC_NOT_FOUND, fmt.Sprintf("topic %.127s does not exist on %s", o.Topic, s.b.cfg.Group), nil)
		}
		if o.QueueId >= max(t.ReadQueues, t.WriteQueues) {
			return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("queue id %d out of range of topic %s", o.QueueId, o.Topic))
		}
	}
	if err := s.b.requireMaster(); err != nil {
		return nil, err
	}
	// A queue whose offset was reset takes no commit until the group has
	// pulled it once (resets.go): the member's commit is of its old
	// position.
	offs := make([]*pb.QueueOffset, 0, len(req.Offsets))
	for _, o := range req.Offsets {
		if !s.b.resets.holds(offsetKey{req.ConsumerGroup, o.Topic, o.QueueId}) {
			offs = append(offs, o)
		}
	}
	if len(offs) == 0 {
		return &pb.UpdateConsumerOffsetResponse{}, nil
	}
	cmd := &pb.RaftCommand{Command: &pb.RaftCommand_CommitOffsets{CommitOffsets: &pb.OffsetCommit{ConsumerGroup: req.ConsumerGroup, Offsets: offs}}}
	if err := s.b.apply(ctx, cmd); err != nil {
		return nil, err
	}
	return &pb.UpdateConsumerOffsetResponse{}, nil
}

func (s *service) GetQueueOffsets(_ context.Context, req *pb.GetQueueOffsetsRequest) (*pb.GetQueueOffsetsResponse, error) {
	if !validName(req.Topic) || req.QueueId < 0 || req.QueueId >= s.b.cfg.MaxQueues {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "a legal topic and a queue id in range are needed")
	}
	min, max := s.b.store.QueueOffsets(req.Topic, req.QueueId)
	return &pb.GetQueueOffsetsResponse{MinOffset: min, MaxOffset: max}, nil
}

func (s *service) SearchOffsetByTime(_ context.Context, req *pb.SearchOffsetByTimeRequest) (*pb.SearchOffsetByTimeResponse, error) {
	if !validName(req.Topic) || req.QueueId < 0 || req.QueueId >= s.b.cfg.MaxQueues {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "a legal topic and a queue id in range are needed")
	}
	off, err := s.b.store.OffsetForTime(req.Topic, req.QueueId, req.Timestamp)
	if err != nil {
		return nil, storeError(err)
	}
	return &pb.SearchOffsetByTimeResponse{Offset: off}, nil
}

func (s *service) QueryMessageById(_ context.Context, req *pb.QueryMessageByIdRequest) (*pb.QueryMessageResponse, error) {
	group, off, err := message.ParseID(req.MsgId)
	if err != nil {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, err.Error())
	}
	if group != s.b.cfg.Group {
		return nil, statusError(codes.NotFound, pb.ErrorReason_MESSAGE_NOT_FOUND, "message id "+req.MsgId+" names group "+group+", this is "+s.b.cfg.Group, nil)
	}
	rec, err := s.b.store.ReadMessage(off)
	if err != nil {
		// An id is the user's: one that names no record's start (never
		// stored, past the end, inside another record, or removed by
		// retention) is not found, said plainly rather than in the
		// store's terms (issue #14).
		if errors.Is(err, storage.ErrOffsetNotFound) || errors.Is(err, storage.ErrOffsetRemoved) || errors.Is(err, storage.ErrCorrupt) {
			return nil, statusError(codes.NotFound, pb.ErrorReason_MESSAGE_NOT_FOUND,
				fmt.Sprintf("no message with id %s on %s (retention may have removed it)", req.MsgId, s.b.cfg.Group), nil)
		}
		return nil, storeError(err)
	}
	return &pb.QueryMessageResponse{Records: [][]byte{rec}}, nil
}

func (s *service) QueryMessageByKey(_ context.Context, req *pb.QueryMessageByKeyRequest) (*pb.QueryMessageResponse, error) {
	if !validName(req.Topic) || req.Key == "" {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "a legal topic and a key are needed")
	}
	limit := int(req.Max)
	if limit <= 0 || limit > 64 {
		limit = 64
	}
	end := req.EndTimestamp
	if end <= 0 {
		end = time.Now().UnixMilli() + 1
	}
	recs, err := s.b.store.QueryByKey(req.Key, limit, req.BeginTimestamp, end)
	if err != nil {
		return nil, storeError(err)
	}
	out := &pb.QueryMessageResponse{}
	for _, raw := range recs {
		if r, err := message.Decode(raw); err == nil && r.Topic == req.Topic {
			out.Records = append(out.Records, raw)
		}
	}
	return out, nil
}

func (s *service) DescribeBroker(context.Context, *pb.DescribeBrokerRequest) (*pb.DescribeBrokerResponse, error) {
	b := s.b
	leaderID, leaderAddr := b.leaderInfo()
	stats := b.node.Raft.Stats()
	out := &pb.DescribeBrokerResponse{
		Group:            b.cfg.Group,
		ReplicaId:        b.self,
		Master:           b.master.Load(),
		Term:             b.term(),
		MasterAddress:    leaderAddr,
		RaftLog:          b.fsm.ownRaftLog(),
		GroupRaftLog:     b.fsm.groupRaftLog(),
		RaftLogMoveIndex: b.fsm.moveIndex.Load(),
	}
	out.AppliedIndex, _ = strconv.ParseUint(stats["applied_index"], 10, 64)
	out.CommitIndex, _ = strconv.ParseUint(stats["commit_index"], 10, 64)
	out.SnapshotIndex, _ = strconv.ParseUint(stats["last_snapshot_index"], 10, 64)
	out.Topics, out.TopicsVersion = b.meta.topicList()
	out.CommitlogMinOffset, _ = b.store.CommitlogOffsets()
	out.CommitlogMaxOffset = b.store.CommittedEnd(out.AppliedIndex) // the same on replicas that applied the same
	if f := b.node.Raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			id, err := strconv.Atoi(string(srv.ID))
			if err != nil || srv.Suffrage != raft.Voter {
				continue
			}
			out.Replicas = append(out.Replicas, &pb.ReplicaInfo{
				Id:          int32(id),
				RaftAddress: string(srv.Address),
				GrpcAddress: b.meta.replicaAddr(int32(id)),
				Master:      int32(id) == leaderID,
			})
		}
	}
	return out, nil
}

// Bounds on one member's heartbeat, which the replica keeps until the
// member expires.
const (
	maxGroupsPerHeartbeat     = 256
	maxSubscriptionsPerMember = 1024
	maxHeldPerMember          = 8192
)

func (s *service) Heartbeat(ctx context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	if req.ClientId == "" || len(req.ClientId) > 255 {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "client id must be 1 to 255 bytes")
	}
	for _, g := range req.Groups {
		if g == nil || !validName(g.Group) {
			return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, "group names must match "+message.TopicRule)
		}
		// What a heartbeat makes the replica keep is bounded.
		if len(g.Subscriptions) > maxSubscriptionsPerMember || len(g.Held) > maxHeldPerMember {
			return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("group %s: %d subscriptions and %d held queues, limits %d and %d",
				g.Group, len(g.Subscriptions), len(g.Held), maxSubscriptionsPerMember, maxHeldPerMember))
		}
	}
	if len(req.Groups) > maxGroupsPerHeartbeat {
		return nil, invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, fmt.Sprintf("%d groups in one heartbeat, limit %d", len(req.Groups), maxGroupsPerHeartbeat))
	}
	if req.Unregister {
		s.b.consumers.unregister(req.ClientId, req.Groups)
		return &pb.HeartbeatResponse{}, nil
	}
	changed := s.b.consumers.heartbeat(req.ClientId, req.Groups, time.Now())
	if conn := grpcConnOf(ctx); conn != nil {
		// Past the cap of client ids on one connection, a member is not
		// tracked by it, and leaves when its heartbeats expire.
		s.b.clientConns.heartbeat(conn, req.ClientId, req.Groups, nil, remotingCaller{})
	}
	return &pb.HeartbeatResponse{ChangedGroups: changed}, nil
}

func (s *service) DescribeConsumerGroups(_ context.Context, req *pb.DescribeConsumerGroupsRequest) (*pb.DescribeConsumerGroupsResponse, error) {
	if req.Group != "" && !validName(req.Group) {
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, "group name must match "+message.TopicRule)
	}
	return &pb.DescribeConsumerGroupsResponse{Groups: s.b.consumers.describe(req.Group, time.Now())}, nil
}

func (s *service) GetConsumerList(_ context.Context, req *pb.GetConsumerListRequest) (*pb.GetConsumerListResponse, error) {
	if !validName(req.ConsumerGroup) {
		return nil, invalid(pb.ErrorReason_ILLEGAL_NAME, "group name must match "+message.TopicRule)
	}
	now := time.Now()
	return &pb.GetConsumerListResponse{ClientIds: s.b.consumers.members(req.ConsumerGroup, now),
		HeardForMs: s.b.consumers.heardFor(now).Milliseconds(), DepartedIds: s.b.consumers.departures(req.ConsumerGroup)}, nil
}

func (s *service) LockQueues(_ context.Context, req *pb.LockQueuesRequest) (*pb.LockQueuesResponse, error) {
	if err := s.checkLock(req.ConsumerGroup, req.ClientId, req.Topic, req.QueueIds); err != nil {
		return nil, err
	}
	got := s.b.locks.lock(req.ConsumerGroup, req.ClientId, req.Topic, req.QueueIds, time.Now())
	return &pb.LockQueuesResponse{LockedQueueIds: got}, nil
}

func (s *service) UnlockQueues(_ context.Context, req *pb.UnlockQueuesRequest) (*pb.UnlockQueuesResponse, error) {
	if err := s.checkLock(req.ConsumerGroup, req.ClientId, req.Topic, req.QueueIds); err != nil {
		return nil, err
	}
	s.b.locks.unlock(req.ConsumerGroup, req.ClientId, req.Topic, req.QueueIds)
	return &pb.UnlockQueuesResponse{}, nil
}

// checkLock validates a lock request; locks live on the master only.
func (s *service) checkLock(group, client, topic string, queues []int32) error {
	if !validName(group) || !validName(topic) || client == "" {
		return invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "a legal group, topic and a client id are needed")
	}
	if slices.ContainsFunc(queues, func(q int32) bool { return q < 0 || q >= s.b.cfg.MaxQueues }) {
		return invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "queue id out of range")
	}
	return s.b.requireMaster()
}
