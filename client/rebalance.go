package client

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// AllocateStrategy splits a topic's queues among a group's members: it
// returns the queues that member me gets. Every member computes it from the
// same sorted lists, so the shares are disjoint and cover every queue.
type AllocateStrategy func(me string, members []string, queues []MessageQueue) []MessageQueue

// AllocateAveragely gives each member a contiguous block of queues, the
// first len(queues) % len(members) members one more (RocketMQ's default).
func AllocateAveragely(me string, members []string, queues []MessageQueue) []MessageQueue {
	i := sort.SearchStrings(members, me)
	if i == len(members) || members[i] != me || len(queues) == 0 {
		return nil
	}
	n, m := len(queues), len(members)
	size := n / m
	start := i*size + min(i, n%m)
	if i < n%m {
		size++
	}
	return queues[start:min(start+size, n)]
}

// AllocateCircle deals the queues out like cards: queue k goes to member
// k % len(members) (RocketMQ's round-robin strategy).
func AllocateCircle(me string, members []string, queues []MessageQueue) []MessageQueue {
	i := sort.SearchStrings(members, me)
	if i == len(members) || members[i] != me {
		return nil
	}
	var out []MessageQueue
	for k := i; k < len(queues); k += len(members) {
		out = append(out, queues[k])
	}
	return out
}

// rebalancer keeps this member's share of its subscriptions' queues
// running (RocketMQ's RebalanceImpl): every RebalanceInterval, when a
// broker or a route says the group or a topic's queues changed, and soon
// again while a rebalance is unsettled, it splits each topic's queues
// among the group's members by the strategy, starts a pull loop and a
// process queue for each queue gained and stops those of each queue lost,
// committing its offset. An orderly member first takes a queue's lock on
// its master, renews it every LockInterval, and lets it go with the queue.
type rebalancer struct {
	cfg     PushConfig
	group   string
	pc      *PullConsumer // topics' queues, start offsets, queue locks
	log     *slog.Logger
	offsets *committer
	pull    *pullService
	consume *consumeService
	// members lists the group's members; heartbeat tells the brokers
	// which queues this member holds (and registers it with replicas the
	// routes now name).
	members   func(ctx context.Context, topic string) ([]string, error)
	heartbeat func()

	subs  map[string]string // topic -> tag expression; read-only once Start has added the retry topic
	asked chan struct{}     // a rebalance asked for now
	// retryAwaited: this member sent a message back, so the group's
	// retry topic exists or soon will; until its route is known the
	// rebalance counts the subscription unsettled and retries soon.
	retryAwaited atomic.Bool

	mu     sync.Mutex
	queues map[MessageQueue]*heldQueue
}

// heldQueue is a queue this member consumes: its process queue, and what
// stops its pull loop (and orderly worker) and tells when they ended.
type heldQueue struct {
	pq     *processQueue
	cancel context.CancelFunc
	done   chan struct{}
}

func newRebalancer(cfg PushConfig, group string, pc *PullConsumer, log *slog.Logger, offsets *committer,
	pull *pullService, consume *consumeService,
	members func(context.Context, string) ([]string, error), heartbeat func()) *rebalancer {
	return &rebalancer{cfg: cfg, group: group, pc: pc, log: log, offsets: offsets, pull: pull, consume: consume,
		members: members, heartbeat: heartbeat,
		subs: map[string]string{}, asked: make(chan struct{}, 1), queues: map[MessageQueue]*heldQueue{}}
}

// subscribe adds topic's queues, filtered by expr, to the rebalance
// (before Start).
func (r *rebalancer) subscribe(topic, expr string) { r.subs[topic] = expr }

// topics lists the subscribed topics, sorted.
func (r *rebalancer) topics() []string {
	topics := make([]string, 0, len(r.subs))
	for topic := range r.subs {
		topics = append(topics, topic)
	}
	slices.Sort(topics)
	return topics
}

// subscriptions lists the subscriptions by topic, as heartbeats carry
// them.
func (r *rebalancer) subscriptions() []*pb.Subscription {
	var out []*pb.Subscription
	for _, topic := range r.topics() {
		out = append(out, &pb.Subscription{Topic: topic, Expression: r.subs[topic]})
	}
	return out
}

// trigger asks for a rebalance now.
func (r *rebalancer) trigger() {
	select {
	case r.asked <- struct{}{}:
	default:
	}
}

// awaitRetryTopic subscribes to the group's retry topic as soon as its
// route is known: messages were sent back, and their redelivery comes
// through it (issue #14: the first retry came only at the next
// rebalance, 20 s later).
func (r *rebalancer) awaitRetryTopic() {
	r.retryAwaited.Store(true)
	r.trigger()
}

// Unsettled rebalances are retried after unsettledRetry, doubling up to
// unsettledRetryMax: a consumer started before its topic's route is known,
// or before the brokers list it, takes its queues within about half a
// second of that changing, rather than at the next heartbeat (30 s) and
// rebalance (20 s) (issue #14: a new topic's consumer sat at 0 queues for
// ~40 s). A consumer of a topic that never appears asks the name server
// twice a second.
const (
	unsettledRetry    = 50 * time.Millisecond
	unsettledRetryMax = 500 * time.Millisecond
)

// run rebalances every RebalanceInterval, when asked to (trigger), and
// soon again, after a heartbeat, while a rebalance is unsettled, until
// ctx ends.
func (r *rebalancer) run(ctx context.Context) {
	retry := unsettledRetry
	for {
		wait := r.cfg.RebalanceInterval
		if r.rebalance(ctx) {
			retry = unsettledRetry
		} else {
			// The route may now name replicas this member has not
			// registered with: tell them before asking again.
			r.heartbeat()
			wait, retry = min(retry, wait), min(2*retry, unsettledRetryMax)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-r.asked:
			t.Stop()
		}
	}
}

// rebalance computes this member's share of every subscription and
// starts and stops queues to match, and reports whether it is settled. It
// is not while a subscription has no route (but the group's retry topic
// before this member sent anything back: it may never exist), or while
// the brokers do not list this member (its first heartbeat is on the
// way); such a member keeps what it has.
func (r *rebalancer) rebalance(ctx context.Context) bool {
	want, settled, ok := r.wanted(ctx)
	if !ok {
		return false
	}
	return r.assign(ctx, want) && settled
}

// wanted is the queues this member's share should be, with their
// expressions; settled is false while a subscription has no route, ok
// false when a share could not be computed.
func (r *rebalancer) wanted(ctx context.Context) (want map[MessageQueue]string, settled, ok bool) {
	want, settled = map[MessageQueue]string{}, true
	for topic, expr := range r.subs {
		queues, topicSettled, ok := r.topicShare(ctx, topic)
		if !ok {
			return nil, false, false
		}
		settled = settled && topicSettled
		for _, mq := range queues {
			want[mq] = expr
		}
	}
	return want, settled, true
}

// topicShare is this member's share of topic's queues. A topic without a
// route keeps the queues of it this member holds, unsettled but for the
// group's retry topic before this member sent anything back.
func (r *rebalancer) topicShare(ctx context.Context, topic string) (queues []MessageQueue, settled, ok bool) {
	retryTopic := message.RetryTopic(r.group)
	queues, err := r.pc.Queues(ctx, topic)
	if errors.Is(err, ErrTopicNotReadable) {
		queues, err = nil, nil // made unreadable: this member reads none of it
	}
	if reason, _ := pb.ReasonOf(err); reason == pb.ErrorReason_TOPIC_NOT_FOUND {
		// Not created yet (a retry topic before the first retry), or a
		// name server that just restarted and has not learned it yet:
		// keep whatever queues of it this member has.
		return r.heldOf(topic), topic == retryTopic && !r.retryAwaited.Load(), true
	}
	if err != nil {
		r.log.Debug("rebalance: no route", "topic", topic, "err", err)
		return nil, false, false
	}
	if topic == retryTopic {
		r.retryAwaited.Store(false)
	}
	queues, ok = r.share(ctx, topic, queues)
	return queues, true, ok
}

// share is this member's share of topic's queues: all of them when
// broadcasting, else what the strategy gives it among the group's
// members; false while the brokers do not list it.
func (r *rebalancer) share(ctx context.Context, topic string, queues []MessageQueue) ([]MessageQueue, bool) {
	if r.cfg.Broadcasting {
		return queues, true
	}
	members, err := r.members(ctx, topic)
	if err != nil {
		return nil, false
	}
	if _, listed := slices.BinarySearch(members, r.cfg.ClientID); !listed {
		return nil, false
	}
	return r.cfg.Strategy(r.cfg.ClientID, members, queues), true
}

// assign stops the queues held but not wanted and starts those wanted but
// not held; it reports false when a queue could not learn where to start.
func (r *rebalancer) assign(ctx context.Context, want map[MessageQueue]string) (settled bool) {
	settled = true
	gone := r.unwanted(want)
	for _, mq := range gone {
		r.stopQueue(mq)
	}
	started := false
	for mq, expr := range want {
		if !r.holds(mq) {
			ok := r.startQueue(ctx, mq, expr)
			settled, started = settled && ok, started || ok
		}
	}
	if len(gone) > 0 || started {
		r.heartbeat() // the brokers' view of what this member holds (raftmq group describe)
	}
	return settled
}

// startQueue starts pulling mq from the group's committed offset, or from
// where ConsumeFrom says when there is none. It reports false when it
// could not learn where to start, for the rebalance to try again soon.
func (r *rebalancer) startQueue(ctx context.Context, mq MessageQueue, expr string) bool {
	if r.cfg.Orderly && !r.lock(ctx, mq) {
		return true // another member still holds it; the next rebalance tries again
	}
	off, err := r.startOffset(ctx, mq)
	if err != nil {
		r.log.Debug("rebalance: no start offset", "queue", mq, "err", err)
		return false
	}
	qctx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	hq := &heldQueue{pq: newProcessQueue(off), cancel: cancel, done: make(chan struct{})}
	tasks := r.consume.queueTasks(qctx, &running)
	r.offsets.track(mq, off) // before the queue is listed: every listed queue is tracked
	r.mu.Lock()
	r.queues[mq] = hq
	r.mu.Unlock()
	running.Add(1)
	go func() {
		defer running.Done()
		r.pull.pullQueue(qctx, mq, expr, hq.pq, tasks)
	}()
	go func() {
		running.Wait()
		close(hq.done)
	}()
	return true
}

// startOffset is the group's committed offset for mq or, when it has
// none, where ConsumeFrom says; consuming from the last offset, a young
// queue starts at 0 (ConsumeFrom).
func (r *rebalancer) startOffset(ctx context.Context, mq MessageQueue) (int64, error) {
	off, err := r.offsets.fetch(ctx, mq, r.cfg.ConsumeFrom == ConsumeFromLast)
	if err != nil || off >= 0 {
		return off, err
	}
	switch r.cfg.ConsumeFrom {
	case ConsumeFromFirst:
		min, _, err := r.pc.Offsets(ctx, mq)
		return min, err
	case ConsumeFromTime:
		return r.pc.OffsetForTime(ctx, mq, r.cfg.ConsumeFromTime)
	default:
		_, max, err := r.pc.Offsets(ctx, mq)
		return max, err
	}
}

// stopQueue stops pulling mq, commits its offset and forgets it.
func (r *rebalancer) stopQueue(mq MessageQueue) {
	r.mu.Lock()
	hq := r.queues[mq]
	r.mu.Unlock()
	if hq == nil {
		return
	}
	hq.cancel()
	<-hq.done
	hq.pq.drop()
	r.offsets.commit(mq, hq.pq.commitOffset())
	r.mu.Lock()
	delete(r.queues, mq)
	r.mu.Unlock()
	r.offsets.forget(mq)
	if r.cfg.Orderly {
		r.unlock(mq)
	}
}

// stopQueues stops every queue's pull loop and orderly worker, at
// Shutdown; the queues stay listed for the last commit.
func (r *rebalancer) stopQueues() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, hq := range r.queues {
		hq.cancel()
		<-hq.done
	}
}

// lock takes mq's lock on its master for this member.
func (r *rebalancer) lock(ctx context.Context, mq MessageQueue) bool {
	ok := false
	err := r.pc.onMaster(ctx, mq, func(b pb.BrokerClient) error {
		resp, err := b.LockQueues(ctx, &pb.LockQueuesRequest{ConsumerGroup: r.group, ClientId: r.cfg.ClientID, Topic: mq.Topic, QueueIds: []int32{mq.QueueID}})
		ok = err == nil && len(resp.LockedQueueIds) == 1
		return err
	})
	return err == nil && ok
}

func (r *rebalancer) unlock(mq MessageQueue) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r.pc.onMaster(ctx, mq, func(b pb.BrokerClient) error {
		_, err := b.UnlockQueues(ctx, &pb.UnlockQueuesRequest{ConsumerGroup: r.group, ClientId: r.cfg.ClientID, Topic: mq.Topic, QueueIds: []int32{mq.QueueID}})
		return err
	})
}

// renewLocks renews the leases of the queues held; a queue whose lock is
// lost (another member took it) stops here.
func (r *rebalancer) renewLocks(ctx context.Context) {
	for _, mq := range r.assigned() {
		if !r.lock(ctx, mq) && ctx.Err() == nil {
			r.stopQueue(mq)
		}
	}
}

// holds reports whether this member holds mq.
func (r *rebalancer) holds(mq MessageQueue) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.queues[mq]
	return ok
}

// heldOf lists the queues of topic this member holds.
func (r *rebalancer) heldOf(topic string) []MessageQueue {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []MessageQueue
	for mq := range r.queues {
		if mq.Topic == topic {
			out = append(out, mq)
		}
	}
	return out
}

// unwanted lists the queues held but not in want.
func (r *rebalancer) unwanted(want map[MessageQueue]string) []MessageQueue {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gone []MessageQueue
	for mq := range r.queues {
		if _, keep := want[mq]; !keep {
			gone = append(gone, mq)
		}
	}
	return gone
}

// processQueues is the process queue of each queue held.
func (r *rebalancer) processQueues() map[MessageQueue]*processQueue {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[MessageQueue]*processQueue, len(r.queues))
	for mq, hq := range r.queues {
		out[mq] = hq.pq
	}
	return out
}

// assigned lists the queues held, by group and id.
func (r *rebalancer) assigned() []MessageQueue {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]MessageQueue, 0, len(r.queues))
	for mq := range r.queues {
		out = append(out, mq)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].QueueID < out[j].QueueID
	})
	return out
}

// held lists the queues held, sorted, as heartbeats carry them.
func (r *rebalancer) held() []*pb.HeldQueue {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*pb.HeldQueue, 0, len(r.queues))
	for mq := range r.queues {
		out = append(out, &pb.HeldQueue{Topic: mq.Topic, BrokerGroup: mq.Group, QueueId: mq.QueueID})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && (a.BrokerGroup < b.BrokerGroup || a.BrokerGroup == b.BrokerGroup && a.QueueId < b.QueueId)
	})
	return out
}
