package broker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
)

// offsetCommitter replicates the offsets that ride on pulls: it keeps the
// latest per group and queue and applies them every OffsetCommitInterval,
// one Raft entry per group, instead of an entry per pull. An offset not yet
// replicated when the master fails is lost: the group re-reads a little
// (at-least-once).
type offsetCommitter struct {
	interval time.Duration // OffsetCommitInterval
	isMaster func() bool   // only the master commits
	// meta holds the replicated offsets: one a pull carries again
	// unchanged is not committed again.
	meta  *metadata
	apply func(context.Context, *pb.RaftCommand) error // Broker.apply
	log   *slog.Logger

	mu      sync.Mutex
	pending map[offsetKey]int64
}

func newOffsetCommitter(interval time.Duration, meta *metadata, isMaster func() bool,
	apply func(context.Context, *pb.RaftCommand) error, log *slog.Logger) *offsetCommitter {
	return &offsetCommitter{interval: interval, isMaster: isMaster, meta: meta, apply: apply, log: log,
		pending: map[offsetKey]int64{}}
}

func (c *offsetCommitter) add(group, topic string, queue int32, offset int64) {
	c.mu.Lock()
	c.pending[offsetKey{group, topic, queue}] = offset
	c.mu.Unlock()
}

// pendingOffset is the offset a pull committed for the queue that is not
// replicated yet, if any.
func (c *offsetCommitter) pendingOffset(group, topic string, queue int32) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	off, ok := c.pending[offsetKey{group, topic, queue}]
	return off, ok
}

// forget drops the pending commits of group on topic (their offsets were
// just reset).
func (c *offsetCommitter) forget(group, topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.pending {
		if k.group == group && k.topic == topic {
			delete(c.pending, k)
		}
	}
}

func (c *offsetCommitter) run(ctx context.Context) {
	every(ctx, c.interval, func(time.Time) { c.flush(ctx) })
}

func (c *offsetCommitter) flush(ctx context.Context) {
	c.mu.Lock()
	pending := c.pending
	c.pending = map[offsetKey]int64{}
	c.mu.Unlock()
	if len(pending) == 0 || !c.isMaster() {
		return
	}
	byGroup := map[string]*pb.OffsetCommit{}
	for k, off := range pending {
		if c.meta.offset(k.group, k.topic, k.queue) == off {
			// Unchanged (an idle consumer's pulls carry the same offset
			// again and again): no Raft entry, no fsync on every replica.
			continue
		}
		oc := byGroup[k.group]
		if oc == nil {
			oc = &pb.OffsetCommit{ConsumerGroup: k.group}
			byGroup[k.group] = oc
		}
		oc.Offsets = append(oc.Offsets, &pb.QueueOffset{Topic: k.topic, QueueId: k.queue, Offset: off})
	}
	for _, oc := range byGroup {
		if err := c.apply(ctx, &pb.RaftCommand{Command: &pb.RaftCommand_CommitOffsets{CommitOffsets: oc}}); err != nil {
			c.log.Warn("offset commit not replicated", "group", oc.ConsumerGroup, "err", err)
		}
	}
}
