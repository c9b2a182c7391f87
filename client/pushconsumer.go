package client

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/internal/defaults"
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
// As with RocketMQ, ConsumeFromLast starts a young queue (one that still
// holds its first message, among its broker's newest writes: the broker's
// young-queue-bytes, by default 40% of its memory) at 0, so that a group
// started after the first sends to a new topic reads them; on a topic
// younger than that, a new group reads all it holds. ConsumeFromTime
// starts at its time: RocketMQ's consumers start a young queue at 0 there
// too, which reads what the time was chosen to skip.
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
	if c.Strategy == nil {
		c.Strategy = AllocateAveragely
	}
	defaults.IfNotPositive(&c.Workers, 20)
	defaults.IfNotPositive(&c.BatchSize, 1)
	defaults.IfNotPositive(&c.PullBatch, 32)
	defaults.IfNotPositive(&c.PullSuspend, 15*time.Second)
	defaults.IfNotPositive(&c.MaxCachedMessages, 1000)
	defaults.IfNotPositive(&c.MaxCachedBytes, 100<<20)
	defaults.IfNotPositive(&c.MaxSpan, 2000)
	defaults.IfNotPositive(&c.PullBackoff, 50*time.Millisecond)
	defaults.IfNotPositive(&c.ErrorBackoff, 3*time.Second)
	defaults.IfNotPositive(&c.RetryDelay, 5*time.Second)
	defaults.IfNotPositive(&c.RebalanceInterval, 20*time.Second)
	defaults.IfNotPositive(&c.HeartbeatInterval, 30*time.Second)
	defaults.IfNotPositive(&c.CommitInterval, 5*time.Second)
	defaults.IfNotPositive(&c.LockInterval, 20*time.Second)
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
	opts options
	cfg  PushConfig
	// r is the pull consumer's router, shared: heartbeats, member lists
	// and route watches go through its connections and routes.
	r     *router
	pc    *PullConsumer
	state lifecycle

	rb      *rebalancer
	consume *consumeService
	offsets *committer
	known   memberView // the group's members as last listed (memberlist.go)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // loops
}

// NewPushConsumer makes a push consumer of the group set by WithGroup.
func NewPushConsumer(cfg PushConfig, opts ...Option) (*PushConsumer, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	r := newRouter(o)
	pc, err := newPullConsumer(o, r, cfg.ClientID)
	if err != nil {
		return nil, err
	}
	store, err := openOffsetStore(cfg, o.group, pc)
	if err != nil {
		return nil, err
	}
	c := &PushConsumer{opts: o, cfg: cfg, r: r, pc: pc, offsets: newCommitter(store, o.logger)}
	// The services tell the rebalance what they learn: pulls that the
	// group changed, send-backs that the retry topic is coming.
	pull := newPullService(cfg, pc, o.logger, func() { c.rb.trigger() })
	c.consume = newConsumeService(cfg, o.group, pc, o.logger, func() { c.rb.awaitRetryTopic() })
	c.rb = newRebalancer(cfg, o.group, pc, o.logger, c.offsets, pull, c.consume, c.members, c.heartbeat)
	return c, nil
}

// Subscribe registers the listener for topic's messages matching expr ("*"
// or "TagA || TagB"). Call it before Start; one listener serves every
// subscription.
func (c *PushConsumer) Subscribe(topic, expr string, listener MessageListener) error {
	if c.state.started() {
		return errors.New("client: Subscribe after Start")
	}
	if _, err := parseTags(expr); err != nil {
		return err
	}
	if topic == "" || listener == nil {
		return errors.New("client: Subscribe needs a topic and a listener")
	}
	c.rb.subscribe(topic, expr)
	c.consume.listen(listener)
	return nil
}

// ClientID is this member's id in its group.
func (c *PushConsumer) ClientID() string { return c.cfg.ClientID }

// Start joins the group and starts consuming. It may be called once.
func (c *PushConsumer) Start() error {
	if len(c.rb.topics()) == 0 {
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
		c.rb.subscribe(message.RetryTopic(c.opts.group), "*")
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.consume.start(c.ctx)
	// Register with the brokers before the first rebalance, which needs
	// this member in the group's member list.
	c.heartbeat()
	c.loop(c.cfg.HeartbeatInterval, c.heartbeat)
	c.loop(c.cfg.CommitInterval, c.commitAll)
	if c.cfg.Orderly {
		c.loop(c.cfg.LockInterval, func() { c.rb.renewLocks(c.ctx) })
	}
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		c.rb.run(c.ctx)
	}()
	go func() {
		defer c.wg.Done()
		c.watchRoutes()
	}()
	return nil
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
	c.rb.stopQueues()
	c.consume.wait()
	c.commitAll()
	// Leave the group so the others take its queues now.
	c.sendHeartbeat(context.Background(), true)
	return c.pc.Shutdown()
}

// commitAll commits every held queue's offset that moved.
func (c *PushConsumer) commitAll() { c.offsets.commitAll(c.rb.processQueues()) }

// Assigned lists the queues this member consumes now.
func (c *PushConsumer) Assigned() []MessageQueue { return c.rb.assigned() }

// replicas returns the addresses of every replica of the groups hosting
// the subscriptions. Heartbeats go to all of them, not only the masters:
// a replica that becomes master then already knows the group's members,
// and no member takes every queue for want of the others' heartbeats.
func (c *PushConsumer) replicas(ctx context.Context) []string {
	set := map[string]bool{}
	for _, topic := range c.rb.topics() {
		addrs, err := c.r.replicaAddrs(ctx, topic)
		if err != nil {
			continue
		}
		for _, addr := range addrs {
			set[addr] = true
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
	info := &pb.ConsumerGroupInfo{Group: c.opts.group, Mode: pb.ConsumeMode_CLUSTERING, Subscriptions: c.rb.subscriptions()}
	if c.cfg.Broadcasting {
		info.Mode = pb.ConsumeMode_BROADCASTING
	}
	if !unregister {
		info.Held = c.rb.held()
	}
	c.toEveryReplica(ctx, c.replicas(ctx), func(hctx context.Context, addr string, b pb.BrokerClient) {
		resp, err := b.Heartbeat(hctx, &pb.HeartbeatRequest{ClientId: c.cfg.ClientID, Groups: []*pb.ConsumerGroupInfo{info}, Unregister: unregister})
		if err != nil {
			c.opts.logger.Debug("heartbeat failed", "broker", addr, "err", err)
			return
		}
		if len(resp.ChangedGroups) > 0 {
			c.rb.trigger()
		}
	})
}

// toEveryReplica calls each address at once, each call bounded by 3 s, and
// returns when all are done: a replica that does not answer (frozen, cut
// off) delays no other and costs one timeout in all.
func (c *PushConsumer) toEveryReplica(ctx context.Context, addrs []string, call func(context.Context, string, pb.BrokerClient)) {
	var wg sync.WaitGroup
	for _, addr := range addrs {
		b, err := c.r.broker(addr)
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
