package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// offsetStore keeps a consumer group's offsets: on the brokers (clustering)
// or in a local file (broadcasting: each member consumes everything, so
// each keeps its own).
type offsetStore interface {
	// fetch is the group's committed offset for mq, -1 when none; with
	// zeroIfYoung, 0 rather than -1 for a queue its broker finds young
	// (the brokers' store only).
	fetch(ctx context.Context, mq MessageQueue, zeroIfYoung bool) (int64, error)
	commit(ctx context.Context, mq MessageQueue, off int64) error
}

// openOffsetStore opens where a push consumer of group keeps its offsets:
// with Broadcasting the local file (OffsetFile, or one named after the
// group in the working directory), else the brokers, through pc.
func openOffsetStore(cfg PushConfig, group string, pc *PullConsumer) (offsetStore, error) {
	if !cfg.Broadcasting {
		return remoteOffsets{pc}, nil
	}
	path := cfg.OffsetFile
	if path == "" {
		path = "raftmq-offsets-" + group + ".json"
	}
	return openLocalOffsets(path)
}

type remoteOffsets struct{ pc *PullConsumer }

func (r remoteOffsets) fetch(ctx context.Context, mq MessageQueue, zeroIfYoung bool) (int64, error) {
	return r.pc.fetchOffset(ctx, mq, zeroIfYoung)
}

func (r remoteOffsets) commit(ctx context.Context, mq MessageQueue, off int64) error {
	return r.pc.CommitOffset(ctx, mq, off)
}

// localOffsets is a JSON file of "topic/group/queue" -> offset, replaced
// atomically on each commit.
type localOffsets struct {
	path string
	mu   sync.Mutex
	offs map[string]int64
}

func openLocalOffsets(path string) (*localOffsets, error) {
	l := &localOffsets{path: path, offs: map[string]int64{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("client: read offsets file: %w", err)
	}
	if err := json.Unmarshal(b, &l.offs); err != nil {
		return nil, fmt.Errorf("client: offsets file %s: %w", path, err)
	}
	return l, nil
}

func offsetKey(mq MessageQueue) string {
	return strings.Join([]string{mq.Topic, mq.Group, strconv.Itoa(int(mq.QueueID))}, "/")
}

func (l *localOffsets) fetch(_ context.Context, mq MessageQueue, _ bool) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if off, ok := l.offs[offsetKey(mq)]; ok {
		return off, nil
	}
	return -1, nil
}

func (l *localOffsets) commit(_ context.Context, mq MessageQueue, off int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.offs[offsetKey(mq)] = off
	b, err := json.MarshalIndent(l.offs, "", "  ")
	if err != nil {
		return err
	}
	if dir := filepath.Dir(l.path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	tmp := l.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("client: write offsets file: %w", err)
	}
	return os.Rename(tmp, l.path)
}

// committer commits a push consumer's offsets to its store: each queue's,
// every CommitInterval, when the queue is taken away and at Shutdown. It
// remembers what it committed for the queues the consumer holds, so that
// an offset that did not move is not committed again.
type committer struct {
	store offsetStore
	log   *slog.Logger

	mu   sync.Mutex
	last map[MessageQueue]int64 // per held queue: the offset committed last, or started from
}

func newCommitter(store offsetStore, log *slog.Logger) *committer {
	return &committer{store: store, log: log, last: map[MessageQueue]int64{}}
}

// fetch is the group's committed offset for mq (offsetStore.fetch).
func (o *committer) fetch(ctx context.Context, mq MessageQueue, zeroIfYoung bool) (int64, error) {
	return o.store.fetch(ctx, mq, zeroIfYoung)
}

// track starts remembering mq, held from off.
func (o *committer) track(mq MessageQueue, off int64) {
	o.mu.Lock()
	o.last[mq] = off
	o.mu.Unlock()
}

// forget stops remembering mq: it is no longer held.
func (o *committer) forget(mq MessageQueue) {
	o.mu.Lock()
	delete(o.last, mq)
	o.mu.Unlock()
}

// commitAll commits every queue's offset that moved.
func (o *committer) commitAll(queues map[MessageQueue]*processQueue) {
	offs := make(map[MessageQueue]int64, len(queues))
	for mq, pq := range queues {
		offs[mq] = pq.commitOffset()
	}
	for mq, off := range offs {
		o.commit(mq, off)
	}
}

// commit commits off for mq, unless mq is held and was committed at off
// or past it already.
func (o *committer) commit(mq MessageQueue, off int64) {
	o.mu.Lock()
	last, ok := o.last[mq]
	o.mu.Unlock()
	if ok && off <= last {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := o.store.commit(ctx, mq, off); err != nil {
		o.log.Debug("offset commit failed", "queue", mq, "err", err)
		return
	}
	o.mu.Lock()
	if _, still := o.last[mq]; still {
		o.last[mq] = off
	}
	o.mu.Unlock()
}
