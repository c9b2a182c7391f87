package client

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// Producer sends messages to the masters of the broker groups hosting
// their topic. It is safe for concurrent use.
type Producer struct {
	opts    options
	r       *router
	seqs    *sequencer    // nil without WithIdempotentRetries
	rr      atomic.Uint64 // round-robin position over a topic's queues
	faults  *brokerFaults
	streams *sendStreams // nil: every send an RPC (WithSendStreams)
	listed  sync.Map     // topic → *listedQueues
	state   lifecycle
	// accepting is held shared while an async or one-way send is taken
	// (state checked, wg added) and exclusively by Shutdown while it
	// stops taking them, so none is taken after Shutdown began to wait.
	accepting sync.RWMutex
	wg        sync.WaitGroup // async and one-way sends in flight
}

// SendResult is where a message was stored.
type SendResult struct {
	MsgID       string
	Queue       MessageQueue
	QueueOffset int64
	UniqKey     string
}

// NewProducer makes a producer; Start it before sending.
func NewProducer(opts ...Option) (*Producer, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	p := &Producer{opts: o, r: newRouter(o), faults: newBrokerFaults(o.faultIsolation)}
	if o.sendStreams && o.signer == nil { // a signature covers one RPC's request
		p.streams = newSendStreams()
	}
	if o.idempotentRetries && o.producerIDs {
		p.seqs = newSequencer()
	}
	return p, nil
}

// Start readies the producer. It may be called once.
func (p *Producer) Start() error { return p.state.start() }

// Shutdown stops taking sends, waits for the async and one-way sends it
// took (each is sent, within the send timeout, and its callback called)
// and closes the connections. It may be called once; nothing of the
// producer runs after it.
func (p *Producer) Shutdown() error {
	p.accepting.Lock()
	err := p.state.shutdown()
	p.accepting.Unlock()
	if err != nil {
		return err
	}
	p.wg.Wait()
	p.streams.close()
	p.r.close()
	return nil
}

// sendRequest is one try of a send: on the broker's send stream when it
// is small and the producer streams (WithSendStreams), else as an RPC.
func (p *Producer) sendRequest(ctx context.Context, addr string, b pb.BrokerClient, req *pb.SendMessageRequest) (*pb.SendMessageResponse, error) {
	if p.streams != nil && len(req.Records) <= streamedSendMax {
		if s := p.streams.of(addr); s != nil {
			resp, err := s.send(ctx, b, req)
			if !errors.Is(err, errNoSendStream) {
				return resp, err
			}
		}
	}
	return b.SendMessage(ctx, req)
}

// Send sends one message and waits for it to be stored on a quorum of its
// group's replicas.
func (p *Producer) Send(ctx context.Context, m *Message) (*SendResult, error) {
	res, err := p.send(ctx, []*Message{m}, nil)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// SendBatch sends messages of one topic as one batch: stored atomically,
// in order, in one queue.
func (p *Producer) SendBatch(ctx context.Context, msgs []*Message) ([]*SendResult, error) {
	return p.send(ctx, msgs, nil)
}

// SendOrderly sends m to the queue its sharding key maps to, so messages
// with the same key keep their order (as long as the topic's queues do
// not change). A failed send is retried on the same queue only.
func (p *Producer) SendOrderly(ctx context.Context, m *Message, shardingKey string) (*SendResult, error) {
	h := fnv.New32a()
	h.Write([]byte(shardingKey))
	sum := h.Sum32()
	res, err := p.send(ctx, []*Message{m}, func(queues []MessageQueue) MessageQueue {
		return queues[int(sum%uint32(len(queues)))]
	})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// SendAsync sends m in the background and calls cb with the outcome.
// A send taken before Shutdown is sent even while Shutdown waits for it.
func (p *Producer) SendAsync(ctx context.Context, m *Message, cb func(*SendResult, error)) error {
	p.accepting.RLock()
	defer p.accepting.RUnlock()
	if err := p.state.running(); err != nil {
		return err
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		res, err := p.sendTaken(ctx, []*Message{m}, nil)
		if err != nil {
			cb(nil, err)
			return
		}
		cb(res[0], nil)
	}()
	return nil
}

// SendOneway sends m without waiting for or reporting the outcome.
func (p *Producer) SendOneway(ctx context.Context, m *Message) error {
	if err := p.checkMessages([]*Message{m}); err != nil {
		return err
	}
	return p.SendAsync(context.WithoutCancel(ctx), m, func(*SendResult, error) {})
}

func (p *Producer) checkMessages(msgs []*Message) error {
	if len(msgs) == 0 {
		return errors.New("client: no messages to send")
	}
	topic := msgs[0].Topic
	for _, m := range msgs {
		switch {
		case m == nil:
			return errors.New("client: nil message")
		case m.Topic == "":
			return errors.New("client: message without a topic")
		case m.Topic != topic:
			return errors.New("client: a batch goes to one topic")
		case len(m.Body) == 0:
			return errors.New("client: message body is empty")
		case len(m.Body) > p.opts.maxMessageSize:
			return fmt.Errorf("client: body of %d bytes over the limit of %d", len(m.Body), p.opts.maxMessageSize)
		}
	}
	return nil
}

// writeQueue is a queue a send can go to, with its group's master.
type writeQueue struct {
	MessageQueue
	master   string
	replicas []*pb.ReplicaInfo
}

// isolatedRouteRefresh is how old a route may be while it names a master
// that round-robin sends steer around: the name servers are asked again
// this often until they name the group's new master, so the group takes
// writes again as soon as it has one, not when the isolation ends.
const isolatedRouteRefresh = 200 * time.Millisecond

// writeQueues lists a topic's writable queues, by group and id. A topic no
// name server knows yet goes to queue 0 of every group: a broker in dev
// mode creates it on first send, others answer TOPIC_NOT_FOUND.
func (p *Producer) writeQueues(ctx context.Context, topic string) ([]writeQueue, error) {
	route, err := p.r.route(ctx, topic)
	if err == nil && p.faults.anyIsolated(route, time.Now()) {
		route, err = p.r.routeWithin(ctx, topic, isolatedRouteRefresh)
	}
	if reason, _ := pb.ReasonOf(err); reason == pb.ErrorReason_TOPIC_NOT_FOUND {
		groups, gerr := p.r.clusterGroups(ctx)
		if gerr != nil || len(groups) == 0 {
			return nil, err
		}
		var out []writeQueue
		for _, g := range groups {
			out = append(out, writeQueue{MessageQueue{topic, g.Group, 0}, masterAddr(g.Replicas), g.Replicas})
		}
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	if l, ok := p.listed.Load(topic); ok && l.(*listedQueues).route == route {
		return l.(*listedQueues).queues, nil
	}
	var out []writeQueue
	for _, g := range route.Groups {
		if g.Perm&message.PermWrite == 0 {
			continue
		}
		for q := int32(0); q < g.WriteQueues; q++ {
			out = append(out, writeQueue{MessageQueue{topic, g.Group, q}, masterAddr(g.Replicas), g.Replicas})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].QueueID < out[j].QueueID
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("client: topic %s has no writable queue", topic)
	}
	p.listed.Store(topic, &listedQueues{route: route, queues: out})
	return out, nil
}

// listedQueues are a topic's write queues as listed from one route, which
// the router caches until it fetches a newer: listing and sorting them
// for every send was 3.8% of the bench client's CPU under 16 synchronous
// senders (pprof, 2026-12-04). Callers only read them.
type listedQueues struct {
	route  *pb.RouteResponse
	queues []writeQueue
}

// send tries a batch on a queue (chosen by pick, or round robin avoiding
// the group that failed last) and retries retriable failures within the
// send timeout: a NOT_LEADER answer redirects to the master it names,
// within the same try.
func (p *Producer) send(ctx context.Context, msgs []*Message, pick func([]MessageQueue) MessageQueue) ([]*SendResult, error) {
	if err := p.state.running(); err != nil {
		return nil, err
	}
	return p.sendTaken(ctx, msgs, pick)
}

// sendTaken is send for a send already taken while the producer ran (an
// async one): Shutdown waits for it rather than failing it.
func (p *Producer) sendTaken(ctx context.Context, msgs []*Message, pick func([]MessageQueue) MessageQueue) ([]*SendResult, error) {
	if err := p.checkMessages(msgs); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.sendTimeout)
	defer cancel()
	topic := msgs[0].Topic
	// Encoded once, for queue 0; an attempt on another queue rewrites only
	// the queue ids (message.SetQueueID).
	req := &pb.SendMessageRequest{Topic: topic, TimeoutMs: p.opts.sendTimeout.Milliseconds()}
	records, keys, err := encodeRecords(msgs)
	if err != nil {
		return nil, err
	}
	req.Records = records
	var (
		lastErr   error
		avoid     string
		redirect  string
		redirectQ MessageQueue
		hopped    bool          // this try was redirected once already
		stay      *MessageQueue // the queue of a try with an unknown outcome
		numbers   *seqAssign    // the send's producer id and sequence on its queue (sequencer.go)
	)
	for attempt := 0; attempt <= p.opts.retries && ctx.Err() == nil; attempt++ {
		var mq MessageQueue
		addr := redirect
		if addr != "" {
			mq = redirectQ
		} else {
			hopped = false
			queues, err := p.writeQueues(ctx, topic)
			if err != nil {
				return nil, err
			}
			wq := p.choose(queues, pick, avoid)
			if stay != nil {
				if i := slices.IndexFunc(queues, func(q writeQueue) bool { return q.MessageQueue == *stay }); i >= 0 {
					wq = queues[i]
				}
			}
			mq, addr = wq.MessageQueue, wq.master
			if addr == "" && len(wq.replicas) > 0 {
				// The name servers know no master yet (gossip lags the
				// election): ask a replica, whose NOT_LEADER answer names
				// the master as soon as it knows it.
				addr = wq.replicas[attempt%len(wq.replicas)].GrpcAddress
			}
		}
		redirect = ""
		if addr == "" { // no replica known at all
			lastErr = fmt.Errorf("client: group %s has no master right now", mq.Group)
			p.r.invalidate(topic)
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		b, err := p.r.broker(addr)
		if err != nil {
			return nil, err
		}
		if mq.QueueID != req.QueueId {
			if err := message.SetQueueID(req.Records, mq.QueueID); err != nil {
				return nil, fmt.Errorf("client: %w", err)
			}
			req.QueueId = mq.QueueID
		}
		actx, acancel := ctx, context.CancelFunc(func() {})
		if p.opts.attemptTimeout > 0 {
			actx, acancel = context.WithTimeout(ctx, p.opts.attemptTimeout)
			req.TimeoutMs = p.opts.attemptTimeout.Milliseconds()
		}
		if p.seqs != nil && (numbers == nil || numbers.mq != mq) {
			a := p.seqs.assign(actx, b, mq, len(msgs))
			numbers = &a
		}
		if numbers != nil {
			req.ProducerId, req.ProducerEpoch, req.Sequence = numbers.numbers()
		}
		resp, err := p.sendRequest(actx, addr, b, req)
		acancel()
		if err == nil {
			out := make([]*SendResult, len(resp.Results))
			for i, r := range resp.Results {
				out[i] = &SendResult{MsgID: r.MsgId, Queue: MessageQueue{topic, resp.Group, resp.QueueId}, QueueOffset: r.QueueOffset, UniqKey: keys[i]}
			}
			return out, nil
		}
		lastErr = err
		reason, meta := pb.ReasonOf(err)
		if reason == pb.ErrorReason_UNKNOWN_PRODUCER && numbers != nil && numbers.g != nil {
			// The group forgot the id (a silence longer than its window,
			// or its table full) and refused this try: numbered anew. But
			// if an earlier try's outcome was unknown, only the unique
			// keys can find its copy: the send goes on without numbers.
			p.seqs.forget(mq.Group, numbers.g)
			numbers = nil
			if stay != nil {
				numbers = &seqAssign{mq: mq}
			}
			continue
		}
		if !retriable(err) {
			return nil, err
		}
		unknown := reason == pb.ErrorReason_TIMEOUT
		// A group whose writes are paused (its Raft log moving) answered
		// and stored nothing: the send goes to another group, as from
		// one that refused it.
		if c := status.Code(err); (c == codes.DeadlineExceeded || c == codes.Unavailable) && reason != pb.ErrorReason_WRITES_PAUSED {
			p.faults.mark(addr, time.Now()) // no answer: steer round-robin sends elsewhere for a while
			unknown = true
		}
		if unknown && p.opts.idempotentRetries {
			stay = &mq // the broker deduplicates within its group only
		}
		p.r.invalidate(topic)
		if reason == pb.ErrorReason_NOT_LEADER && meta["leader"] != "" && meta["leader"] != addr && !hopped {
			// A hop to the master it names, within this try: a send that
			// fails ends on a master's answer, not on a slave's pointer
			// to it (one hop a try, so two replicas naming each other
			// still use the tries up).
			redirect, redirectQ, hopped = meta["leader"], mq, true
			attempt--
			continue
		}
		if pick == nil && stay == nil {
			avoid = mq.Group
		}
		// Let an election finish and the name servers hear of it.
		sleepCtx(ctx, min(50*time.Millisecond<<attempt, 500*time.Millisecond))
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	return nil, fmt.Errorf("client: send to %s failed: %w", topic, lastErr)
}

func (p *Producer) choose(queues []writeQueue, pick func([]MessageQueue) MessageQueue, avoid string) writeQueue {
	if pick != nil {
		mqs := make([]MessageQueue, len(queues))
		for i, q := range queues {
			mqs[i] = q.MessageQueue
		}
		want := pick(mqs)
		for _, q := range queues {
			if q.MessageQueue == want {
				return q
			}
		}
	}
	now := time.Now()
	var fallback *writeQueue
	for range queues {
		q := queues[int(p.rr.Add(1)%uint64(len(queues)))]
		if q.Group == avoid {
			continue
		}
		if !p.faults.isolated(q.master, now) {
			return q
		}
		if fallback == nil {
			fallback = &q
		}
	}
	if fallback != nil { // every other group's master is isolated too
		return *fallback
	}
	return queues[int(p.rr.Add(1)%uint64(len(queues)))]
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// lifecycle makes Start and Shutdown callable once each.
type lifecycle struct{ state atomic.Int32 }

const (
	stateNew int32 = iota
	stateRunning
	stateShutdown
)

func (l *lifecycle) start() error {
	if !l.state.CompareAndSwap(stateNew, stateRunning) {
		return errors.New("client: Start called twice or after Shutdown")
	}
	return nil
}

// started reports whether Start was called: what must come before it
// (a push consumer's subscriptions) is refused after.
func (l *lifecycle) started() bool { return l.state.Load() != stateNew }

func (l *lifecycle) shutdown() error {
	if !l.state.CompareAndSwap(stateRunning, stateShutdown) {
		return errors.New("client: Shutdown without Start, or twice")
	}
	return nil
}

// ErrNotRunning is what a producer or consumer answers before Start or
// after Shutdown.
var ErrNotRunning = errors.New("client: not started, or shut down")

func (l *lifecycle) running() error {
	if l.state.Load() != stateRunning {
		return ErrNotRunning
	}
	return nil
}
