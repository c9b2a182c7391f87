package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// PullConsumer pulls queues explicitly: the application chooses queues and
// offsets. Pulls go to the queue's master, or to the replica a master
// suggested for a consumer far behind (slave reads), until a result sends
// them back; on an error they go back to the master at once.
type PullConsumer struct {
	opts  options
	r     *router
	state lifecycle
	wg    sync.WaitGroup
	// clientID, set by a push consumer, goes with each pull so that the
	// answer says when the group's members changed (PullResult.GroupChanged).
	clientID string

	mu      sync.Mutex
	readsAt map[MessageQueue]string // queue -> replica address suggested for it
}

// PullStatus says what a pull found.
type PullStatus int

const (
	PullFound PullStatus = iota
	PullNoNewMessage
	PullNoMatchedMessage
	PullOffsetIllegal // below the minimum (moved by retention) or past the maximum: pull from NextOffset
)

// PullResult is a pull's outcome.
type PullResult struct {
	Status     PullStatus
	NextOffset int64
	MinOffset  int64
	MaxOffset  int64
	Messages   []*MessageExt
	// GroupChanged: the group's members changed since this member last
	// heard (push consumers rebalance on it).
	GroupChanged bool
}

// NewPullConsumer makes a pull consumer of the group set by WithGroup.
func NewPullConsumer(opts ...Option) (*PullConsumer, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return newPullConsumer(o, newRouter(o), "")
}

// newPullConsumer makes a pull consumer on router r; a push consumer
// shares r (it heartbeats and follows routes on it) and names clientID.
func newPullConsumer(o options, r *router, clientID string) (*PullConsumer, error) {
	if o.group == "" {
		return nil, errors.New("client: a consumer needs a group (WithGroup)")
	}
	return &PullConsumer{opts: o, r: r, clientID: clientID, readsAt: map[MessageQueue]string{}}, nil
}

// Start readies the consumer. It may be called once.
func (c *PullConsumer) Start() error { return c.state.start() }

// Shutdown waits for callback pulls and closes the connections.
func (c *PullConsumer) Shutdown() error {
	if err := c.state.shutdown(); err != nil {
		return err
	}
	c.wg.Wait()
	c.r.close()
	return nil
}

// ErrTopicNotReadable: no broker group lets the topic be read (its
// permission is w or none, as a dead-letter topic's is).
var ErrTopicNotReadable = errors.New("client: topic not readable")

// Queues lists a topic's readable queues; ErrTopicNotReadable when it has
// queues but none readable.
func (c *PullConsumer) Queues(ctx context.Context, topic string) ([]MessageQueue, error) {
	route, err := c.r.route(ctx, topic)
	if err != nil {
		return nil, err
	}
	var out []MessageQueue
	for _, g := range route.Groups {
		if g.Perm&message.PermRead == 0 && !c.readsDeadLetters(topic) {
			continue
		}
		for q := int32(0); q < g.ReadQueues; q++ {
			out = append(out, MessageQueue{topic, g.Group, q})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].QueueID < out[j].QueueID
	})
	if len(out) == 0 && len(route.Groups) > 0 {
		return nil, fmt.Errorf("%w: %s (dead letters: raftmq dlq resend)", ErrTopicNotReadable, topic)
	}
	return out, nil
}

// onMaster calls fn on mq's master.
func (c *PullConsumer) onMaster(ctx context.Context, mq MessageQueue, fn func(pb.BrokerClient) error) error {
	var err error
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		var g *pb.GroupRoute
		if g, err = c.r.groupRoute(ctx, mq.Topic, mq.Group); err != nil {
			return err
		}
		addr := masterAddr(g.Replicas)
		if addr == "" {
			err = fmt.Errorf("client: group %s has no master right now", mq.Group)
			c.r.invalidate(mq.Topic)
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		var b pb.BrokerClient
		if b, err = c.r.broker(addr); err != nil {
			return err
		}
		if err = fn(b); err == nil || !retriable(err) {
			return err
		}
		c.r.invalidate(mq.Topic)
	}
	if err == nil { // the loop never ran: ctx is done
		err = ctx.Err()
	}
	return err
}

// Pull reads up to max messages of mq from offset without waiting.
func (c *PullConsumer) Pull(ctx context.Context, mq MessageQueue, expr string, offset int64, max int32) (*PullResult, error) {
	return c.PullBlocking(ctx, mq, expr, offset, max, 0)
}

// PullBlocking reads mq from offset; when nothing is there, the master
// holds the pull up to suspend and answers as soon as a message arrives.
func (c *PullConsumer) PullBlocking(ctx context.Context, mq MessageQueue, expr string, offset int64, max int32, suspend time.Duration) (*PullResult, error) {
	if err := c.state.running(); err != nil {
		return nil, err
	}
	return c.pull(ctx, mq, expr, offset, max, suspend, 0)
}

// readsDeadLetters reports whether topic is a dead-letter topic this
// consumer may read (WithDeadLetterReads).
func (c *PullConsumer) readsDeadLetters(topic string) bool {
	return c.opts.deadLetters && strings.HasPrefix(topic, message.DLQPrefix)
}

// pull is the one request path of every pull (blocking, callback, and the
// push consumer's); commit > 0 commits that offset for the group with it.
func (c *PullConsumer) pull(ctx context.Context, mq MessageQueue, expr string, offset int64, max int32, suspend time.Duration, commit int64) (*PullResult, error) {
	// A held pull is an idle RPC for up to suspend; past that and a margin
	// the broker or the network is gone.
	ctx, cancel := context.WithTimeout(ctx, suspend+15*time.Second)
	defer cancel()
	tags, err := parseTags(expr)
	if err != nil {
		return nil, err
	}
	req := &pb.PullMessageRequest{ConsumerGroup: c.opts.group, Topic: mq.Topic, QueueId: mq.QueueID,
		QueueOffset: offset, MaxMessages: max, SuspendTimeoutMs: suspend.Milliseconds(), Subscription: expr, CommitOffset: commit,
		ClientId: c.clientID, DeadLetters: c.readsDeadLetters(mq.Topic)}
	g, err := c.r.groupRoute(ctx, mq.Topic, mq.Group)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	addr := c.readsAt[mq]
	c.mu.Unlock()
	if addr == "" {
		addr = masterAddr(g.Replicas)
	}
	var resp *pb.PullMessageResponse
	if addr != "" {
		var b pb.BrokerClient
		if b, err = c.r.broker(addr); err == nil {
			resp, err = b.PullMessage(ctx, req)
		}
	}
	if addr == "" || err != nil {
		// Not the master, or a replica gone: back to the master.
		c.forgetReplica(mq)
		if addr != "" && !retriable(err) {
			return nil, err
		}
		err = c.onMaster(ctx, mq, func(b pb.BrokerClient) (err error) {
			resp, err = b.PullMessage(ctx, req)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	c.follow(mq, g, resp)
	out := &PullResult{NextOffset: resp.NextBeginOffset, MinOffset: resp.MinOffset, MaxOffset: resp.MaxOffset, GroupChanged: resp.GroupChanged}
	switch resp.Status {
	case pb.PullStatus_PULL_FOUND:
		out.Status = PullFound
	case pb.PullStatus_PULL_NO_NEW_MESSAGE:
		out.Status = PullNoNewMessage
	case pb.PullStatus_PULL_NO_MATCHED_MESSAGE:
		out.Status = PullNoMatchedMessage
	default:
		out.Status = PullOffsetIllegal
	}
	for _, raw := range resp.Records {
		m, err := decodeMessage(raw, mq.Group)
		if err != nil {
			return nil, fmt.Errorf("client: broker sent an undecodable record: %w", err)
		}
		// Brokers filter by tag hash; hashes collide, so check the tag.
		if tags == nil || slices.Contains(tags, m.Tags) {
			out.Messages = append(out.Messages, m)
		}
	}
	if out.Status == PullFound && len(out.Messages) == 0 {
		out.Status = PullNoMatchedMessage
	}
	return out, nil
}

// follow records where the answer says to read mq next. A master
// suggests a slave for a consumer far behind; a slave only ever sends the
// consumer back to the master, so its suggestion is taken as that even
// when the route names another master: the route is stale (an election
// since), and the pull after goes to the master the refreshed route names.
func (c *PullConsumer) follow(mq MessageQueue, g *pb.GroupRoute, resp *pb.PullMessageResponse) {
	if resp.SuggestReplicaId == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if resp.ReplicaId != g.MasterId {
		delete(c.readsAt, mq)
		if resp.SuggestReplicaId != g.MasterId {
			c.r.invalidate(mq.Topic)
		}
		return
	}
	for _, rep := range g.Replicas {
		if rep.Id == resp.SuggestReplicaId && !rep.Master {
			c.readsAt[mq] = rep.GrpcAddress
		}
	}
}

func (c *PullConsumer) forgetReplica(mq MessageQueue) {
	c.mu.Lock()
	delete(c.readsAt, mq)
	c.mu.Unlock()
}

// PullAsync is PullBlocking in the background; cb gets the outcome.
func (c *PullConsumer) PullAsync(ctx context.Context, mq MessageQueue, expr string, offset int64, max int32, suspend time.Duration, cb func(*PullResult, error)) error {
	if err := c.state.running(); err != nil {
		return err
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		cb(c.PullBlocking(ctx, mq, expr, offset, max, suspend))
	}()
	return nil
}

// CommitOffset stores the group's next offset to consume for mq.
func (c *PullConsumer) CommitOffset(ctx context.Context, mq MessageQueue, offset int64) error {
	return c.onMaster(ctx, mq, func(b pb.BrokerClient) error {
		_, err := b.UpdateConsumerOffset(ctx, &pb.UpdateConsumerOffsetRequest{ConsumerGroup: c.opts.group,
			Offsets: []*pb.QueueOffset{{Topic: mq.Topic, QueueId: mq.QueueID, Offset: offset}}})
		return err
	})
}

// FetchOffset returns the group's committed offset for mq, -1 when none.
func (c *PullConsumer) FetchOffset(ctx context.Context, mq MessageQueue) (int64, error) {
	return c.fetchOffset(ctx, mq, false)
}

// fetchOffset is FetchOffset; with zeroIfYoung, 0 rather than -1 for a
// queue the broker finds young (pb.QueryConsumerOffsetRequest.ZeroIfYoung):
// where a push consumer starts, as RocketMQ's do.
func (c *PullConsumer) fetchOffset(ctx context.Context, mq MessageQueue, zeroIfYoung bool) (int64, error) {
	var off int64
	err := c.onMaster(ctx, mq, func(b pb.BrokerClient) error {
		r, err := b.QueryConsumerOffset(ctx, &pb.QueryConsumerOffsetRequest{ConsumerGroup: c.opts.group, Topic: mq.Topic, QueueId: mq.QueueID, ZeroIfYoung: zeroIfYoung})
		if err == nil {
			off = r.Offset
		}
		return err
	})
	return off, err
}

// OffsetForTime returns the first offset of mq stored at or after t.
func (c *PullConsumer) OffsetForTime(ctx context.Context, mq MessageQueue, t time.Time) (int64, error) {
	var off int64
	err := c.onMaster(ctx, mq, func(b pb.BrokerClient) error {
		r, err := b.SearchOffsetByTime(ctx, &pb.SearchOffsetByTimeRequest{Topic: mq.Topic, QueueId: mq.QueueID, Timestamp: t.UnixMilli()})
		if err == nil {
			off = r.Offset
		}
		return err
	})
	return off, err
}

// Offsets returns mq's first and next offsets.
func (c *PullConsumer) Offsets(ctx context.Context, mq MessageQueue) (min, max int64, err error) {
	err = c.onMaster(ctx, mq, func(b pb.BrokerClient) error {
		r, err := b.GetQueueOffsets(ctx, &pb.GetQueueOffsetsRequest{Topic: mq.Topic, QueueId: mq.QueueID})
		if err == nil {
			min, max = r.MinOffset, r.MaxOffset
		}
		return err
	})
	return min, max, err
}

// parseTags reads a subscription expression: nil for "*" or "".
func parseTags(expr string) ([]string, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" || expr == "*" {
		return nil, nil
	}
	var tags []string
	for _, t := range strings.Split(expr, "||") {
		if t = strings.TrimSpace(t); t == "" || t == "*" {
			return nil, fmt.Errorf("client: subscription %q: want \"*\" or tags joined by \"||\"", expr)
		}
		tags = append(tags, t)
	}
	return tags, nil
}
