package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// ConsumeResult is what a listener says of the messages it was given.
type ConsumeResult int

const (
	// ConsumeSuccess: consumed; the group's offset may move past them.
	ConsumeSuccess ConsumeResult = iota
	// ConsumeRetryLater: deliver them again later.
	ConsumeRetryLater
)

// MessageListener consumes messages (a batch of PushConfig.BatchSize at
// most). A panic counts as ConsumeRetryLater.
type MessageListener func(ctx context.Context, msgs []*MessageExt) ConsumeResult

// ConsumeFrom says where a queue the group has no committed offset for
// starts (RocketMQ's consumeFromWhere); a committed offset always wins.
type ConsumeFrom int

const (
	ConsumeFromLast ConsumeFrom = iota
	ConsumeFromFirst
	ConsumeFromTime
)

// PushConfig tunes a push consumer. Zero fields take the defaults, which
// are RocketMQ's.
type PushConfig struct {
	ConsumeFrom     ConsumeFrom
	ConsumeFromTime time.Time
	Strategy        AllocateStrategy // default AllocateAveragely
	Workers         int              // listener goroutines; default 20
	BatchSize       int              // messages per listener call; default 1
	PullBatch       int32            // messages per pull; default 32
	PullSuspend     time.Duration    // long-polling hold; default 15 s
	// Flow control per queue: pulling pauses (PullBackoff) while more than
	// MaxCachedMessages or MaxCachedBytes are held, or the held offsets
	// span more than MaxSpan. Defaults 1000, 100 MiB, 2000, 50 ms.
	MaxCachedMessages int
	MaxCachedBytes    int64
	MaxSpan           int64
	PullBackoff       time.Duration
	// ErrorBackoff: wait after a failed pull. Default 3 s.
	ErrorBackoff time.Duration
	// RetryDelay: a message the listener asked to retry is delivered
	// again after it (locally). Default 5 s.
	RetryDelay time.Duration
	// RebalanceInterval, HeartbeatInterval, CommitInterval: defaults 20 s,
	// 30 s, 5 s.
	RebalanceInterval time.Duration
	HeartbeatInterval time.Duration
	CommitInterval    time.Duration
	// ClientID identifies this member in its group. Default
	// hostname@pid@counter.
	ClientID string
	// Orderly consumes each queue with one goroutine, in offset order,
	// holding the queue's lock on its master (renewed every LockInterval,
	// default 20 s; the broker's lease is 60 s). A message the listener
	// asks to retry blocks its queue until it succeeds.
	Orderly      bool
	LockInterval time.Duration
	// Broadcasting gives every member every queue (each message to every
	// member) and keeps the offsets in OffsetFile on local disk (default
	// raftmq-offsets-<group>.json in the working directory).
	Broadcasting bool
	OffsetFile   string
	// MaxReconsumeTimes: a message the listener asks to retry more often
	// than this goes to the group's dead-letter topic (0: the broker's
	// setting, 16 by default).
	MaxReconsumeTimes int32
}

func (c PushConfig) withDefaults() PushConfig {
	dur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Strategy == nil {
		c.Strategy = AllocateAveragely
	}
	if c.Workers <= 0 {
		c.Workers = 20
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 1
	}
	if c.PullBatch <= 0 {
		c.PullBatch = 32
	}
	if c.MaxCachedMessages <= 0 {
		c.MaxCachedMessages = 1000
	}
	if c.MaxCachedBytes <= 0 {
		c.MaxCachedBytes = 100 << 20
	}
	if c.MaxSpan <= 0 {
		c.MaxSpan = 2000
	}
	dur(&c.PullSuspend, 15*time.Second)
	dur(&c.PullBackoff, 50*time.Millisecond)
	dur(&c.ErrorBackoff, 3*time.Second)
	dur(&c.RetryDelay, 5*time.Second)
	dur(&c.RebalanceInterval, 20*time.Second)
	dur(&c.HeartbeatInterval, 30*time.Second)
	dur(&c.CommitInterval, 5*time.Second)
	dur(&c.LockInterval, 20*time.Second)
	if c.ClientID == "" {
		host, _ := os.Hostname()
		c.ClientID = host + "@" + strconv.Itoa(os.Getpid()) + "@" + newUniqKey()
	}
	return c
}

// PushConsumer consumes a group's share of its subscriptions' queues and
// hands messages to a listener (clustering mode: each message to one
// member of the group). Its pieces follow RocketMQ's: one pull loop per
// assigned queue feeds that queue's process queue and a pool of workers;
// flow control pauses pulls; rebalance splits the queues among the
// group's members every RebalanceInterval and when a broker says the group
// changed or a topic's route (followed on a name server, routewatch.go)
// changed its queues; the group's offset per queue is the smallest offset
// still in flight, committed every CommitInterval, with pulls, when a
// queue is taken away, and at Shutdown.
type PushConsumer struct {
	opts  options
	cfg   PushConfig
	pc    *PullConsumer
	state lifecycle

	subs     map[string]string // topic -> tag expression
	listener MessageListener

	mu        sync.Mutex
	queues    map[MessageQueue]*queueState
	committed map[MessageQueue]int64
	offsets   offsetStore

	work      chan consumeTask
	rebalance chan struct{}
	// retryAwaited: this member sent a message back, so the group's
	// retry topic exists or soon will; until its route is known the
	// rebalance counts the subscription unsettled and retries soon.
	retryAwaited atomic.Bool
	ctx          context.Context
	cancel       context.CancelFunc
	wg           sync.WaitGroup // loops
	workers      sync.WaitGroup // listener goroutines and delayed retries
}

type queueState struct {
	pq     *processQueue
	tasks  chan consumeTask // the shared pool's, or (orderly) the queue's own
	cancel context.CancelFunc
	done   chan struct{}
}

type consumeTask struct {
	mq   MessageQueue
	pq   *processQueue
	msgs []*MessageExt
}

// NewPushConsumer makes a push consumer of the group set by WithGroup.
func NewPushConsumer(cfg PushConfig, opts ...Option) (*PushConsumer, error) {
	pc, err := NewPullConsumer(opts...)
	if err != nil {
		return nil, err
	}
	c := &PushConsumer{opts: pc.opts, cfg: cfg.withDefaults(), pc: pc, subs: map[string]string{},
		queues: map[MessageQueue]*queueState{}, committed: map[MessageQueue]int64{}}
	pc.clientID = c.cfg.ClientID
	c.offsets = remoteOffsets{pc}
	if c.cfg.Broadcasting {
		path := c.cfg.OffsetFile
		if path == "" {
			path = "raftmq-offsets-" + pc.opts.group + ".json"
		}
		if c.offsets, err = openLocalOffsets(path); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Subscribe registers the listener for topic's messages matching expr ("*"
// or "TagA || TagB"). Call it before Start; one listener serves every
// subscription.
func (c *PushConsumer) Subscribe(topic, expr string, listener MessageListener) error {
	if c.state.state.Load() != stateNew {
		return errors.New("client: Subscribe after Start")
	}
	if _, err := parseTags(expr); err != nil {
		return err
	}
	if topic == "" || listener == nil {
		return errors.New("client: Subscribe needs a topic and a listener")
	}
	c.subs[topic] = expr
	c.listener = listener
	return nil
}

// ClientID is this member's id in its group.
func (c *PushConsumer) ClientID() string { return c.cfg.ClientID }

// Start joins the group and starts consuming. It may be called once.
func (c *PushConsumer) Start() error {
	if len(c.subs) == 0 {
		return errors.New("client: Start without a subscription")
	}
	if err := c.state.start(); err != nil {
		return err
	}
	if err := c.pc.Start(); err != nil {
		return err
	}
	if !c.cfg.Broadcasting && !c.cfg.Orderly {
		// Messages the group sends back come again through its retry
		// topic (created by the broker on the first send-back).
		c.subs[message.RetryTopic(c.opts.group)] = "*"
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.work = make(chan consumeTask, c.cfg.Workers)
	c.rebalance = make(chan struct{}, 1)
	for i := 0; i < c.cfg.Workers; i++ {
		c.workers.Add(1)
		go func() {
			defer c.workers.Done()
			c.worker()
		}()
	}
	// Register with the brokers before the first rebalance, which needs
	// this member in the group's member list.
	c.heartbeat()
	c.loop(c.cfg.HeartbeatInterval, c.heartbeat)
	c.loop(c.cfg.CommitInterval, c.commitAll)
	if c.cfg.Orderly {
		c.loop(c.cfg.LockInterval, c.renewLocks)
	}
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		c.rebalanceLoop()
	}()
	go func() {
		defer c.wg.Done()
		c.watchRoutes()
	}()
	return nil
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

// rebalanceLoop rebalances every RebalanceInterval, when asked to
// (trigger), and soon again, after a heartbeat, while a rebalance is
// unsettled.
func (c *PushConsumer) rebalanceLoop() {
	retry := unsettledRetry
	for {
		wait := c.cfg.RebalanceInterval
		if c.doRebalance() {
			retry = unsettledRetry
		} else {
			// The route may now name replicas this member has not
			// registered with: tell them before asking again.
			c.heartbeat()
			wait, retry = min(retry, wait), min(2*retry, unsettledRetryMax)
		}
		t := time.NewTimer(wait)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-c.rebalance:
			t.Stop()
		}
	}
}

// loop runs f now and every d until Shutdown.
func (c *PushConsumer) loop(d time.Duration, f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			f()
			select {
			case <-c.ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Shutdown stops pulling, lets the listener finish what it holds, commits
// the group's offsets and closes the connections. Nothing of the consumer
// runs after it.
func (c *PushConsumer) Shutdown() error {
	if err := c.state.shutdown(); err != nil {
		return err
	}
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	for _, qs := range c.queues {
		qs.cancel()
		<-qs.done
	}
	c.mu.Unlock()
	c.workers.Wait()
	c.commitAll()
	// Leave the group so the others take its queues now.
	c.sendHeartbeat(context.Background(), true)
	return c.pc.Shutdown()
}

// trigger asks for a rebalance now.
func (c *PushConsumer) trigger() {
	select {
	case c.rebalance <- struct{}{}:
	default:
	}
}

// replicas returns the addresses of every replica of the groups hosting
// the subscriptions. Heartbeats go to all of them, not only the masters:
// a replica that becomes master then already knows the group's members,
// and no member takes every queue for want of the others' heartbeats.
func (c *PushConsumer) replicas(ctx context.Context) []string {
	set := map[string]bool{}
	for topic := range c.subs {
		route, err := c.pc.r.route(ctx, topic)
		if err != nil {
			continue
		}
		for _, g := range route.Groups {
			for _, r := range g.Replicas {
				set[r.GrpcAddress] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for addr := range set {
		out = append(out, addr)
	}
	return out
}

// heartbeat tells every replica who this member is and what it consumes;
// a broker answering that the group changed triggers a rebalance.
func (c *PushConsumer) heartbeat() { c.sendHeartbeat(c.ctx, false) }

// sendHeartbeat sends a heartbeat, or with unregister a goodbye, to every
// replica of the subscriptions' groups.
func (c *PushConsumer) sendHeartbeat(ctx context.Context, unregister bool) {
	info := &pb.ConsumerGroupInfo{Group: c.opts.group, Mode: pb.ConsumeMode_CLUSTERING}
	if c.cfg.Broadcasting {
		info.Mode = pb.ConsumeMode_BROADCASTING
	}
	for topic, expr := range c.subs {
		info.Subscriptions = append(info.Subscriptions, &pb.Subscription{Topic: topic, Expression: expr})
	}
	sort.Slice(info.Subscriptions, func(i, j int) bool { return info.Subscriptions[i].Topic < info.Subscriptions[j].Topic })
	if !unregister {
		info.Held = c.held()
	}
	c.toEveryReplica(ctx, c.replicas(ctx), func(hctx context.Context, addr string, b pb.BrokerClient) {
		resp, err := b.Heartbeat(hctx, &pb.HeartbeatRequest{ClientId: c.cfg.ClientID, Groups: []*pb.ConsumerGroupInfo{info}, Unregister: unregister})
		if err != nil {
			c.opts.logger.Debug("heartbeat failed", "broker", addr, "err", err)
			return
		}
		if len(resp.ChangedGroups) > 0 {
			c.trigger()
		}
	})
}

// toEveryReplica calls each address at once, each call bounded by 3 s, and
// returns when all are done: a replica that does not answer (frozen, cut
// off) delays no other and costs one timeout in all.
func (c *PushConsumer) toEveryReplica(ctx context.Context, addrs []string, call func(context.Context, string, pb.BrokerClient)) {
	var wg sync.WaitGroup
	for _, addr := range addrs {
		b, err := c.pc.r.broker(addr)
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			call(cctx, addr, b)
		}()
	}
	wg.Wait()
}

// members asks every replica of the groups hosting topic for the group's
// members and takes the union: each replica knows the members from their
// heartbeats, and one that has just restarted (and may be master already)
// knows few until they heartbeat again, so one broker's list alone could
// hand a member every queue.
func (c *PushConsumer) members(ctx context.Context, topic string) ([]string, error) {
	route, err := c.pc.r.route(ctx, topic)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, g := range route.Groups {
		for _, r := range g.Replicas {
			addrs = append(addrs, r.GrpcAddress)
		}
	}
	var (
		mu       sync.Mutex
		set      = map[string]bool{}
		answered bool
	)
	c.toEveryReplica(ctx, addrs, func(cctx context.Context, _ string, b pb.BrokerClient) {
		resp, err := b.GetConsumerList(cctx, &pb.GetConsumerListRequest{ConsumerGroup: c.opts.group})
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		answered = true
		for _, id := range resp.ClientIds {
			set[id] = true
		}
	})
	if !answered {
		return nil, fmt.Errorf("client: no replica of %s answered the member list", topic)
	}
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Strings(out)
	return out, nil
}

// doRebalance computes this member's share of every subscription and
// starts and stops queues to match, and reports whether it is settled. It
// is not while a subscription has no route (but the group's retry topic
// before this member sent anything back: it may never exist), or while
// the brokers do not list this member (its first heartbeat is on the
// way); such a member keeps what it has.
func (c *PushConsumer) doRebalance() (settled bool) {
	settled = true
	retryTopic := message.RetryTopic(c.opts.group)
	want := map[MessageQueue]string{} // queue -> expression
	for topic, expr := range c.subs {
		queues, err := c.pc.Queues(c.ctx, topic)
		if errors.Is(err, ErrTopicNotReadable) {
			queues, err = nil, nil // made unreadable: this member reads none of it
		}
		if reason, _ := pb.ReasonOf(err); reason == pb.ErrorReason_TOPIC_NOT_FOUND {
			// Not created yet (a retry topic before the first retry), or a
			// name server that just restarted and has not learned it yet:
			// keep whatever queues of it this member has.
			if topic != retryTopic || c.retryAwaited.Load() {
				settled = false
			}
			c.mu.Lock()
			for mq := range c.queues {
				if mq.Topic == topic {
					want[mq] = expr
				}
			}
			c.mu.Unlock()
			continue
		}
		if err != nil {
			c.opts.logger.Debug("rebalance: no route", "topic", topic, "err", err)
			return false
		}
		if topic == retryTopic {
			c.retryAwaited.Store(false)
		}
		mine := queues
		if !c.cfg.Broadcasting {
			members, err := c.members(c.ctx, topic)
			if err != nil || sort.SearchStrings(members, c.cfg.ClientID) == len(members) ||
				members[sort.SearchStrings(members, c.cfg.ClientID)] != c.cfg.ClientID {
				return false
			}
			mine = c.cfg.Strategy(c.cfg.ClientID, members, queues)
		}
		for _, mq := range mine {
			want[mq] = expr
		}
	}
	c.mu.Lock()
	var gone []MessageQueue
	for mq := range c.queues {
		if _, keep := want[mq]; !keep {
			gone = append(gone, mq)
		}
	}
	c.mu.Unlock()
	for _, mq := range gone {
		c.stopQueue(mq)
	}
	started := false
	for mq, expr := range want {
		c.mu.Lock()
		_, have := c.queues[mq]
		c.mu.Unlock()
		if !have {
			ok := c.startQueue(mq, expr)
			settled, started = settled && ok, started || ok
		}
	}
	if len(gone) > 0 || started {
		c.heartbeat() // the brokers' view of what this member holds (raftmq group describe)
	}
	return settled
}

// held lists the queues this member consumes, sorted.
func (c *PushConsumer) held() []*pb.HeldQueue {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*pb.HeldQueue, 0, len(c.queues))
	for mq := range c.queues {
		out = append(out, &pb.HeldQueue{Topic: mq.Topic, BrokerGroup: mq.Group, QueueId: mq.QueueID})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && (a.BrokerGroup < b.BrokerGroup || a.BrokerGroup == b.BrokerGroup && a.QueueId < b.QueueId)
	})
	return out
}

// startQueue starts pulling mq from the group's committed offset, or from
// where ConsumeFrom says when there is none. It reports false when it
// could not learn where to start, for the rebalance to try again soon.
func (c *PushConsumer) startQueue(mq MessageQueue, expr string) bool {
	if c.cfg.Orderly && !c.lock(mq) {
		return true // another member still holds it; the next rebalance tries again
	}
	off, err := c.offsets.fetch(c.ctx, mq)
	if err == nil && off < 0 {
		var min, max int64
		switch c.cfg.ConsumeFrom {
		case ConsumeFromFirst:
			min, _, err = c.pc.Offsets(c.ctx, mq)
			off = min
		case ConsumeFromTime:
			off, err = c.pc.OffsetForTime(c.ctx, mq, c.cfg.ConsumeFromTime)
		default:
			_, max, err = c.pc.Offsets(c.ctx, mq)
			off = max
		}
	}
	if err != nil {
		c.opts.logger.Debug("rebalance: no start offset", "queue", mq, "err", err)
		return false
	}
	ctx, cancel := context.WithCancel(c.ctx)
	qs := &queueState{pq: newProcessQueue(off), tasks: c.work, cancel: cancel, done: make(chan struct{})}
	var running sync.WaitGroup
	if c.cfg.Orderly {
		qs.tasks = make(chan consumeTask, 1)
		running.Add(1)
		go func() {
			defer running.Done()
			c.orderlyWorker(ctx, qs)
		}()
	}
	c.mu.Lock()
	c.queues[mq] = qs
	c.committed[mq] = off
	c.mu.Unlock()
	running.Add(1)
	go func() {
		defer running.Done()
		c.pullLoop(ctx, mq, expr, qs)
	}()
	go func() {
		running.Wait()
		close(qs.done)
	}()
	return true
}

// orderlyWorker consumes one queue in order; a batch the listener asks to
// retry is tried again, after RetryDelay, before anything after it.
func (c *PushConsumer) orderlyWorker(ctx context.Context, qs *queueState) {
	for {
		var task consumeTask
		select {
		case task = <-qs.tasks:
		case <-ctx.Done():
			return
		}
		for c.consume(task.msgs) != ConsumeSuccess {
			for _, m := range task.msgs {
				m.ReconsumeTimes++
			}
			sleepCtx(ctx, c.cfg.RetryDelay)
			if ctx.Err() != nil {
				return
			}
		}
		qs.pq.remove(task.msgs)
	}
}

// lock takes mq's lock on its master for this member.
func (c *PushConsumer) lock(mq MessageQueue) bool {
	ok := false
	err := c.pc.onMaster(c.ctx, mq, func(b pb.BrokerClient) error {
		r, err := b.LockQueues(c.ctx, &pb.LockQueuesRequest{ConsumerGroup: c.opts.group, ClientId: c.cfg.ClientID, Topic: mq.Topic, QueueIds: []int32{mq.QueueID}})
		ok = err == nil && len(r.LockedQueueIds) == 1
		return err
	})
	return err == nil && ok
}

func (c *PushConsumer) unlock(mq MessageQueue) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c.pc.onMaster(ctx, mq, func(b pb.BrokerClient) error {
		_, err := b.UnlockQueues(ctx, &pb.UnlockQueuesRequest{ConsumerGroup: c.opts.group, ClientId: c.cfg.ClientID, Topic: mq.Topic, QueueIds: []int32{mq.QueueID}})
		return err
	})
}

// renewLocks renews the leases of the queues held; a queue whose lock is
// lost (another member took it) stops here.
func (c *PushConsumer) renewLocks() {
	for _, mq := range c.Assigned() {
		if !c.lock(mq) && c.ctx.Err() == nil {
			c.stopQueue(mq)
		}
	}
}

// stopQueue stops pulling mq, commits its offset and forgets it.
func (c *PushConsumer) stopQueue(mq MessageQueue) {
	c.mu.Lock()
	qs := c.queues[mq]
	c.mu.Unlock()
	if qs == nil {
		return
	}
	qs.cancel()
	<-qs.done
	qs.pq.drop()
	c.commit(mq, qs.pq.commitOffset())
	c.mu.Lock()
	delete(c.queues, mq)
	delete(c.committed, mq)
	c.mu.Unlock()
	if c.cfg.Orderly {
		c.unlock(mq)
	}
}

// pullLoop pulls one queue into its process queue and hands batches to the
// workers, pausing under flow control and after errors.
func (c *PushConsumer) pullLoop(ctx context.Context, mq MessageQueue, expr string, qs *queueState) {
	pq := qs.pq
	for ctx.Err() == nil {
		count, bytes, span := pq.load()
		if count > c.cfg.MaxCachedMessages || bytes > c.cfg.MaxCachedBytes || span > c.cfg.MaxSpan {
			sleepCtx(ctx, c.cfg.PullBackoff)
			continue
		}
		pq.mu.Lock()
		from := pq.next
		pq.mu.Unlock()
		r, err := c.pc.pull(ctx, mq, expr, from, c.cfg.PullBatch, c.cfg.PullSuspend, max(pq.commitOffset(), 0))
		if err != nil {
			if ctx.Err() == nil {
				c.opts.logger.Debug("pull failed", "queue", mq, "err", err)
				sleepCtx(ctx, c.cfg.ErrorBackoff)
			}
			continue
		}
		if r.GroupChanged {
			c.trigger() // a member joined or left: hand queues over now
		}
		if r.Status == PullOffsetIllegal {
			pq.moveTo(r.NextOffset) // reset, or past what retention removed
			continue
		}
		pq.put(r.Messages, r.NextOffset)
		for i := 0; i < len(r.Messages); i += c.cfg.BatchSize {
			task := consumeTask{mq: mq, pq: pq, msgs: r.Messages[i:min(i+c.cfg.BatchSize, len(r.Messages))]}
			select {
			case qs.tasks <- task:
			case <-ctx.Done():
				return
			}
		}
	}
}

// worker calls the listener until Shutdown (tasks still queued then are
// not consumed: their offsets stay uncommitted and they come again); what
// the listener asks to retry is delivered again after RetryDelay.
func (c *PushConsumer) worker() {
	for {
		var task consumeTask
		select {
		case task = <-c.work:
		case <-c.ctx.Done():
			return
		}
		if task.pq.isDropped() {
			continue
		}
		if c.consume(task.msgs) == ConsumeSuccess || c.sendBack(task.msgs) {
			task.pq.remove(task.msgs)
			continue
		}
		// The broker did not take them back: retry here.
		for _, m := range task.msgs {
			m.ReconsumeTimes++
		}
		c.workers.Add(1)
		go func() {
			defer c.workers.Done()
			sleepCtx(c.ctx, c.cfg.RetryDelay)
			select {
			case c.work <- task:
			case <-c.ctx.Done():
			}
		}()
	}
}

// sendBack hands messages the listener could not consume back to their
// broker, which redelivers them through the group's retry topic after a
// delay (or parks them in its dead-letter topic). It reports whether the
// broker took them all.
func (c *PushConsumer) sendBack(msgs []*MessageExt) bool {
	for _, m := range msgs {
		err := c.pc.onMaster(c.ctx, m.Queue, func(b pb.BrokerClient) error {
			_, err := b.ConsumerSendBack(c.ctx, &pb.ConsumerSendBackRequest{ConsumerGroup: c.opts.group, MsgId: m.MsgID,
				MaxReconsumeTimes: c.cfg.MaxReconsumeTimes})
			return err
		})
		if err != nil {
			c.opts.logger.Debug("send back failed; retrying locally", "msg", m.MsgID, "err", err)
			return false
		}
	}
	if !c.cfg.Broadcasting && !c.cfg.Orderly {
		// The redelivery comes through the retry topic: subscribe to it as
		// soon as its route is known (issue #14: the first retry came only
		// at the next rebalance, 20 s later).
		c.retryAwaited.Store(true)
		c.trigger()
	}
	return true
}

func (c *PushConsumer) consume(msgs []*MessageExt) (res ConsumeResult) {
	defer func() {
		if p := recover(); p != nil {
			c.opts.logger.Warn("listener panicked; the messages will be retried", "panic", p)
			res = ConsumeRetryLater
		}
	}()
	return c.listener(c.ctx, msgs)
}

// commitAll commits every queue's offset that moved.
func (c *PushConsumer) commitAll() {
	c.mu.Lock()
	offs := map[MessageQueue]int64{}
	for mq, qs := range c.queues {
		offs[mq] = qs.pq.commitOffset()
	}
	c.mu.Unlock()
	for mq, off := range offs {
		c.commit(mq, off)
	}
}

func (c *PushConsumer) commit(mq MessageQueue, off int64) {
	c.mu.Lock()
	last, ok := c.committed[mq]
	c.mu.Unlock()
	if ok && off <= last {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.offsets.commit(ctx, mq, off); err != nil {
		c.opts.logger.Debug("offset commit failed", "queue", mq, "err", err)
		return
	}
	c.mu.Lock()
	if _, still := c.queues[mq]; still {
		c.committed[mq] = off
	}
	c.mu.Unlock()
}

// Assigned lists the queues this member consumes now.
func (c *PushConsumer) Assigned() []MessageQueue {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]MessageQueue, 0, len(c.queues))
	for mq := range c.queues {
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
