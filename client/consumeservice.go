package client

import (
	"context"
	"log/slog"
	"sync"

	"github.com/raftmq/raftmq/cluster/pb"
)

// consumeTask is a batch of one queue's pulled messages for the listener.
type consumeTask struct {
	mq   MessageQueue
	pq   *processQueue
	msgs []*MessageExt
}

// consumeService hands pulled messages to the listener (RocketMQ's
// ConsumeMessageService): a pool of Workers goroutines serves every queue,
// or with Orderly one goroutine each queue, in offset order. A concurrent
// consumer sends what the listener could not consume back to its broker,
// for a retry through the group's retry topic; an orderly one retries it
// in place, holding up its queue.
type consumeService struct {
	cfg   PushConfig
	group string
	pc    *PullConsumer // send-backs go to the messages' masters
	log   *slog.Logger
	// sentBack is told that messages went back to their broker: their
	// redelivery comes through the group's retry topic.
	sentBack func()

	listener MessageListener
	ctx      context.Context  // the consumer's, from start to Shutdown
	work     chan consumeTask // the pool's
	workers  sync.WaitGroup   // the pool's goroutines and delayed retries
}

func newConsumeService(cfg PushConfig, group string, pc *PullConsumer, log *slog.Logger, sentBack func()) *consumeService {
	return &consumeService{cfg: cfg, group: group, pc: pc, log: log, sentBack: sentBack}
}

// listen sets the listener (before start).
func (s *consumeService) listen(l MessageListener) { s.listener = l }

// start runs the pool until ctx ends.
func (s *consumeService) start(ctx context.Context) {
	s.ctx = ctx
	s.work = make(chan consumeTask, s.cfg.Workers)
	for i := 0; i < s.cfg.Workers; i++ {
		s.workers.Add(1)
		go func() {
			defer s.workers.Done()
			s.worker()
		}()
	}
}

// wait returns when the pool's goroutines and delayed retries have ended
// (after ctx ended).
func (s *consumeService) wait() { s.workers.Wait() }

// queueTasks returns where a queue's pull loop hands its batches: the
// pool's channel or, with Orderly, one of the queue's own, which a worker
// counted in running consumes until ctx ends.
func (s *consumeService) queueTasks(ctx context.Context, running *sync.WaitGroup) chan<- consumeTask {
	if !s.cfg.Orderly {
		return s.work
	}
	tasks := make(chan consumeTask, 1)
	running.Add(1)
	go func() {
		defer running.Done()
		s.orderlyWorker(ctx, tasks)
	}()
	return tasks
}

// orderlyWorker consumes one queue in order; a batch the listener asks to
// retry is tried again, after RetryDelay, before anything after it.
func (s *consumeService) orderlyWorker(ctx context.Context, tasks <-chan consumeTask) {
	for {
		var task consumeTask
		select {
		case task = <-tasks:
		case <-ctx.Done():
			return
		}
		for s.consume(task.msgs) != ConsumeSuccess {
			countRedelivery(task.msgs)
			sleepCtx(ctx, s.cfg.RetryDelay)
			if ctx.Err() != nil {
				return
			}
		}
		task.pq.remove(task.msgs)
	}
}

// worker calls the listener until Shutdown (tasks still queued then are
// not consumed: their offsets stay uncommitted and they come again); what
// the listener asks to retry is delivered again after RetryDelay.
func (s *consumeService) worker() {
	for {
		var task consumeTask
		select {
		case task = <-s.work:
		case <-s.ctx.Done():
			return
		}
		if task.pq.isDropped() {
			continue
		}
		if s.consume(task.msgs) == ConsumeSuccess || s.sendBack(task.msgs) {
			task.pq.remove(task.msgs)
			continue
		}
		// The broker did not take them back: retry here.
		countRedelivery(task.msgs)
		s.workers.Add(1)
		go func() {
			defer s.workers.Done()
			sleepCtx(s.ctx, s.cfg.RetryDelay)
			select {
			case s.work <- task:
			case <-s.ctx.Done():
			}
		}()
	}
}

// countRedelivery counts a delivery more of msgs, for the listener.
func countRedelivery(msgs []*MessageExt) {
	for _, m := range msgs {
		m.ReconsumeTimes++
	}
}

// sendBack hands messages the listener could not consume back to their
// broker, which redelivers them through the group's retry topic after a
// delay (or parks them in its dead-letter topic). It reports whether the
// broker took them all.
func (s *consumeService) sendBack(msgs []*MessageExt) bool {
	for _, m := range msgs {
		err := s.pc.onMaster(s.ctx, m.Queue, func(b pb.BrokerClient) error {
			_, err := b.ConsumerSendBack(s.ctx, &pb.ConsumerSendBackRequest{ConsumerGroup: s.group, MsgId: m.MsgID,
				MaxReconsumeTimes: s.cfg.MaxReconsumeTimes})
			return err
		})
		if err != nil {
			s.log.Debug("send back failed; retrying locally", "msg", m.MsgID, "err", err)
			return false
		}
	}
	if !s.cfg.Broadcasting && !s.cfg.Orderly { // the modes that subscribe to the retry topic
		s.sentBack()
	}
	return true
}

func (s *consumeService) consume(msgs []*MessageExt) (res ConsumeResult) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Warn("listener panicked; the messages will be retried", "panic", p)
			res = ConsumeRetryLater
		}
	}()
	return s.listener(s.ctx, msgs)
}
