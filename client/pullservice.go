package client

import (
	"context"
	"log/slog"
)

// pullService pulls a push consumer's queues (RocketMQ's
// PullMessageService): one loop per held queue long-polls the queue's
// broker from where its process queue left off and hands what it pulls to
// the consume service. Flow control pauses a loop while its process queue
// holds too much; a failed pull is tried again after ErrorBackoff.
type pullService struct {
	cfg PushConfig
	pc  *PullConsumer
	log *slog.Logger
	// groupChanged is told that a pull's answer says the group's members
	// changed.
	groupChanged func()
}

func newPullService(cfg PushConfig, pc *PullConsumer, log *slog.Logger, groupChanged func()) *pullService {
	return &pullService{cfg: cfg, pc: pc, log: log, groupChanged: groupChanged}
}

// pullQueue pulls mq into pq and hands batches to tasks until ctx ends.
func (s *pullService) pullQueue(ctx context.Context, mq MessageQueue, expr string, pq *processQueue, tasks chan<- consumeTask) {
	for ctx.Err() == nil {
		if s.overloaded(pq) {
			sleepCtx(ctx, s.cfg.PullBackoff)
			continue
		}
		r, err := s.pc.pull(ctx, mq, expr, pq.nextOffset(), s.cfg.PullBatch, s.cfg.PullSuspend, max(pq.commitOffset(), 0))
		if err != nil {
			if ctx.Err() == nil {
				s.log.Debug("pull failed", "queue", mq, "err", err)
				sleepCtx(ctx, s.cfg.ErrorBackoff)
			}
			continue
		}
		if r.GroupChanged {
			s.groupChanged() // a member joined or left: hand queues over now
		}
		if r.Status == PullOffsetIllegal {
			pq.moveTo(r.NextOffset) // reset, or past what retention removed
			continue
		}
		pq.put(r.Messages, r.NextOffset)
		if !s.dispatch(ctx, mq, pq, r.Messages, tasks) {
			return
		}
	}
}

// overloaded is flow control: pq holds more messages, more bytes or a
// wider span of offsets than a queue may before its pulls pause.
func (s *pullService) overloaded(pq *processQueue) bool {
	count, bytes, span := pq.load()
	return count > s.cfg.MaxCachedMessages || bytes > s.cfg.MaxCachedBytes || span > s.cfg.MaxSpan
}

// dispatch hands msgs to tasks in batches of BatchSize; it reports false
// when ctx ended first.
func (s *pullService) dispatch(ctx context.Context, mq MessageQueue, pq *processQueue, msgs []*MessageExt, tasks chan<- consumeTask) bool {
	for i := 0; i < len(msgs); i += s.cfg.BatchSize {
		task := consumeTask{mq: mq, pq: pq, msgs: msgs[i:min(i+s.cfg.BatchSize, len(msgs))]}
		select {
		case tasks <- task:
		case <-ctx.Done():
			return false
		}
	}
	return true
}
