package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// offsetStore keeps a consumer group's offsets: on the brokers (clustering)
// or in a local file (broadcasting: each member consumes everything, so
// each keeps its own).
type offsetStore interface {
	fetch(ctx context.Context, mq MessageQueue) (int64, error) // -1: none
	commit(ctx context.Context, mq MessageQueue, off int64) error
}

type remoteOffsets struct{ pc *PullConsumer }

func (r remoteOffsets) fetch(ctx context.Context, mq MessageQueue) (int64, error) {
	return r.pc.FetchOffset(ctx, mq)
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

func (l *localOffsets) fetch(_ context.Context, mq MessageQueue) (int64, error) {
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
