package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// LocalTransactionState is what became of a producer's local transaction,
// as RocketMQ's: commit the half message, roll it back, or not known yet
// (the broker asks again later, by a check-back).
type LocalTransactionState int

const (
	UnknownState LocalTransactionState = iota
	CommitMessageState
	RollbackMessageState
)

func (s LocalTransactionState) String() string {
	switch s {
	case CommitMessageState:
		return "commit"
	case RollbackMessageState:
		return "rollback"
	}
	return "unknown"
}

func (s LocalTransactionState) outcome() pb.TransactionOutcome {
	switch s {
	case CommitMessageState:
		return pb.TransactionOutcome_TRANSACTION_COMMIT
	case RollbackMessageState:
		return pb.TransactionOutcome_TRANSACTION_ROLLBACK
	}
	return pb.TransactionOutcome_TRANSACTION_UNKNOWN
}

// TransactionListener runs a transaction producer's local transactions
// and answers the brokers' check-backs, as RocketMQ's. Both are called
// from the producer's goroutines: ExecuteLocalTransaction from
// SendMessageInTransaction's caller, CheckLocalTransaction one at a time
// per broker group.
type TransactionListener interface {
	// ExecuteLocalTransaction runs the local transaction of a half
	// message just stored, and says whether to commit it.
	ExecuteLocalTransaction(*Message) LocalTransactionState
	// CheckLocalTransaction says what became of the local transaction of
	// a half message left open past the broker's transaction timeout;
	// MsgID is the half's id. The producer that sent the half may have
	// died: any producer of the group may be asked.
	CheckLocalTransaction(*MessageExt) LocalTransactionState
}

// TransactionSendResult is a transactional send's outcome.
type TransactionSendResult struct {
	SendResult                       // where the half message is stored
	State      LocalTransactionState // what the local transaction said
	// Committed is where a commit stored the message; nil for a rollback,
	// and for a commit an earlier try applied whose answer was lost (the
	// broker applies an end once, and answers a repeat with its outcome).
	Committed *SendResult
}

// TransactionProducer sends transactional messages: each is stored as a
// half message that no consumer sees until the producer commits it. It
// keeps a check-back stream open to the master of every broker group its
// topics live on, answering checks with its listener. Safe for concurrent
// use.
type TransactionProducer struct {
	p        *Producer
	listener TransactionListener
	group    string
	clientID string

	mu       sync.Mutex
	topics   map[string]bool
	changed  chan struct{}   // closed, and replaced, when topics grows
	watching map[string]bool // broker groups with a check-back stream

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewTransactionProducer makes a transaction producer for the producer
// group WithGroup names; Start it before sending.
func NewTransactionProducer(listener TransactionListener, opts ...Option) (*TransactionProducer, error) {
	if listener == nil {
		return nil, errors.New("client: a transaction producer needs a listener")
	}
	p, err := NewProducer(opts...)
	if err != nil {
		return nil, err
	}
	if !message.ValidTopic(p.opts.group) {
		return nil, fmt.Errorf("client: a transaction producer needs a producer group (WithGroup) matching %s", message.TopicRule)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tp := &TransactionProducer{p: p, listener: listener, group: p.opts.group, clientID: newUniqKey(),
		topics: map[string]bool{}, changed: make(chan struct{}), watching: map[string]bool{}, ctx: ctx, cancel: cancel}
	for _, t := range p.opts.transactionTopics {
		tp.topics[t] = true
	}
	return tp, nil
}

// Start readies the producer and opens its check-back streams. It may be
// called once.
func (tp *TransactionProducer) Start() error {
	if err := tp.p.Start(); err != nil {
		return err
	}
	tp.wg.Add(1)
	go func() {
		defer tp.wg.Done()
		tp.watchGroups()
	}()
	return nil
}

// Shutdown closes the check-back streams and stops the producer.
func (tp *TransactionProducer) Shutdown() error {
	tp.cancel()
	tp.wg.Wait()
	return tp.p.Shutdown()
}

// SendMessageInTransaction sends m as a half message, runs the listener's
// ExecuteLocalTransaction, and commits or rolls the half back as it says
// (an unknown state leaves the half to a check-back). The error is the
// send's, or, with the half stored, the end's: a half whose end failed is
// ended by a check-back, as RocketMQ's oneway end is.
func (tp *TransactionProducer) SendMessageInTransaction(ctx context.Context, m *Message) (*TransactionSendResult, error) {
	if m == nil {
		return nil, errors.New("client: no message to send")
	}
	tp.addTopic(m.Topic)
	half := *m
	half.Properties = message.CopyProperties(m.Properties, 2)
	half.Properties[message.PropertyTransactionPrepared] = "true"
	half.Properties[message.PropertyProducerGroup] = tp.group
	res, err := tp.p.Send(ctx, &half)
	if err != nil {
		return nil, err
	}
	out := &TransactionSendResult{SendResult: *res, State: tp.listener.ExecuteLocalTransaction(m)}
	if out.State == UnknownState {
		return out, nil
	}
	out.Committed, err = tp.end(ctx, res, out.State)
	return out, err
}

// end ends a half at its group's master, following NOT_LEADER answers,
// within the send timeout.
func (tp *TransactionProducer) end(ctx context.Context, half *SendResult, state LocalTransactionState) (*SendResult, error) {
	ctx, cancel := context.WithTimeout(ctx, tp.p.opts.sendTimeout)
	defer cancel()
	req := &pb.EndTransactionRequest{ProducerGroup: tp.group, MsgId: half.MsgID, Topic: half.Queue.Topic, Outcome: state.outcome()}
	var lastErr error
	redirect := ""
	for attempt := 0; ctx.Err() == nil; attempt++ {
		addr := redirect
		if addr == "" {
			addr = tp.masterOf(ctx, half.Queue.Topic, half.Queue.Group)
		}
		if addr == "" {
			lastErr = fmt.Errorf("client: group %s has no master right now", half.Queue.Group)
		} else if b, err := tp.p.r.broker(addr); err != nil {
			return nil, err
		} else {
			resp, err := b.EndTransaction(ctx, req)
			if err == nil {
				if c := resp.Committed; c != nil {
					return &SendResult{MsgID: c.MsgId, Queue: half.Queue, QueueOffset: c.QueueOffset, UniqKey: half.UniqKey}, nil
				}
				return nil, nil
			}
			lastErr = err
			if !retriable(err) {
				return nil, fmt.Errorf("client: end of transaction %s: %w", half.MsgID, err)
			}
			if reason, meta := pb.ReasonOf(err); reason == pb.ErrorReason_NOT_LEADER && meta["leader"] != "" && meta["leader"] != addr {
				redirect = meta["leader"]
				continue
			}
		}
		redirect = ""
		tp.p.r.invalidate(half.Queue.Topic)
		sleepCtx(ctx, min(50*time.Millisecond<<attempt, 500*time.Millisecond))
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	return nil, fmt.Errorf("client: end of transaction %s: %w", half.MsgID, lastErr)
}

// masterOf is the master address of broker group group as the route of
// topic names it, "" when none is known.
func (tp *TransactionProducer) masterOf(ctx context.Context, topic, group string) string {
	if g, err := tp.p.r.groupRoute(ctx, topic, group); err == nil {
		return masterAddr(g.Replicas)
	}
	return ""
}

func (tp *TransactionProducer) addTopic(topic string) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.topics[topic] {
		return
	}
	tp.topics[topic] = true
	close(tp.changed)
	tp.changed = make(chan struct{})
}

// topicList is the producer's topics, sorted, and the channel closed when
// they next change.
func (tp *TransactionProducer) topicList() ([]string, <-chan struct{}) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	out := make([]string, 0, len(tp.topics))
	for t := range tp.topics {
		out = append(out, t)
	}
	sort.Strings(out)
	return out, tp.changed
}

// watchGroups opens a check-back stream to every broker group the
// producer's topics live on, looking for new ones as the topics grow and
// at every route refresh.
func (tp *TransactionProducer) watchGroups() {
	for {
		topics, changed := tp.topicList()
		for _, t := range topics {
			route, err := tp.p.r.route(tp.ctx, t)
			if err != nil {
				continue
			}
			for _, g := range route.Groups {
				tp.watch(g.Group, t)
			}
		}
		select {
		case <-tp.ctx.Done():
			return
		case <-changed:
		case <-time.After(tp.p.opts.routeRefresh):
		}
	}
}

// watch starts group's check-back stream unless it runs; topic is one
// whose route names the group.
func (tp *TransactionProducer) watch(group, topic string) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.watching[group] {
		return
	}
	tp.watching[group] = true
	tp.wg.Add(1)
	go func() {
		defer tp.wg.Done()
		backoff, redirect := 100*time.Millisecond, ""
		for tp.ctx.Err() == nil {
			served, err := tp.serveChecks(group, topic, redirect)
			redirect = ""
			if reason, meta := pb.ReasonOf(err); reason == pb.ErrorReason_NOT_LEADER && meta["leader"] != "" {
				redirect = meta["leader"]
			}
			if served {
				backoff = 100 * time.Millisecond
			}
			if err != nil && tp.ctx.Err() == nil {
				tp.p.opts.logger.Debug("check-back stream ended", "broker_group", group, "err", err)
			}
			tp.p.r.invalidate(topic)
			sleepCtx(tp.ctx, backoff)
			backoff = min(2*backoff, time.Second)
		}
	}()
}

// serveChecks opens a check-back stream to group's master (addr when set)
// and answers its checks until it ends, or until the producer's topics
// change (a new stream names them all). served says whether it got as far
// as taking checks.
func (tp *TransactionProducer) serveChecks(group, topic, addr string) (served bool, err error) {
	if addr == "" {
		if addr = tp.masterOf(tp.ctx, topic, group); addr == "" {
			return false, fmt.Errorf("client: group %s has no master right now", group)
		}
	}
	b, err := tp.p.r.broker(addr)
	if err != nil {
		return false, err
	}
	topics, changed := tp.topicList()
	ctx, cancel := context.WithCancel(tp.ctx)
	defer cancel()
	go func() {
		select {
		case <-changed:
			cancel()
		case <-ctx.Done():
		}
	}()
	stream, err := b.CheckTransactions(ctx)
	if err != nil {
		return false, err
	}
	if err := stream.Send(&pb.TransactionCheckStreamRequest{ProducerGroup: tp.group, ClientId: tp.clientID, Topics: topics}); err != nil {
		return false, err
	}
	for {
		c, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return served, err
		}
		served = true
		if c.Message == nil {
			continue
		}
		ext := &MessageExt{
			Message: Message{Topic: c.Message.Topic, Tags: c.Message.Tags, Keys: c.Message.Keys, Properties: c.Message.Properties,
				Body: c.Message.Body, Flag: c.Message.Flag},
			MsgID:     c.MsgId,
			Queue:     MessageQueue{Topic: c.Message.Topic, Group: group, QueueID: c.QueueId},
			BornTime:  time.UnixMilli(c.Message.BornTimestamp),
			StoreTime: time.UnixMilli(c.StoreTimestamp),
		}
		state := tp.listener.CheckLocalTransaction(ext)
		if state == UnknownState {
			continue
		}
		if err := stream.Send(&pb.TransactionCheckStreamRequest{Answer: &pb.EndTransactionRequest{
			ProducerGroup: tp.group, MsgId: c.MsgId, Topic: c.Message.Topic, Outcome: state.outcome(), FromCheck: true,
		}}); err != nil {
			return served, err
		}
	}
}
