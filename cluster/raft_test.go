package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// nopFSM applies nothing.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("no snapshots") }
func (nopFSM) Restore(io.ReadCloser) error         { return nil }

// startOne starts a one-member group with test timings.
func startOne(t *testing.T, cfg RaftConfig) *RaftNode {
	t.Helper()
	addr := clustertest.FreeAddrs(t, 1)[0]
	cfg.ID, cfg.Dir, cfg.BindAddr = "1", t.TempDir(), addr
	cfg.Peers = map[string]string{"1": addr}
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = 50*time.Millisecond, 50*time.Millisecond
	cfg.LeaderLeaseTimeout, cfg.CommitTimeout = 50*time.Millisecond, 5*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := StartRaft(cfg, nopFSM{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return n
}

// Pipelined replication is off unless asked for: hashicorp/raft v1.7.3's
// pipeline can wedge a follower's replication and the leader's shutdown
// (RaftConfig.MaxRPCsInFlight). Raft falls back to plain AppendEntries
// when the transport refuses a pipeline.
func TestPipelinedReplicationIsOffByDefault(t *testing.T) {
	n := startOne(t, RaftConfig{})
	if _, err := n.transport.AppendEntriesPipeline("2", "127.0.0.1:1"); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("default transport: AppendEntriesPipeline = %v, want ErrPipelineReplicationNotSupported", err)
	}
	on := startOne(t, RaftConfig{MaxRPCsInFlight: 2})
	if _, err := on.transport.AppendEntriesPipeline("2", "127.0.0.1:1"); errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatal("MaxRPCsInFlight 2: pipelining still refused")
	}
}

// PooledConns is the transport's pool per peer, 3 unless configured.
func TestPooledConnsIsTheTransportPool(t *testing.T) {
	if got := startOne(t, RaftConfig{}).PooledConns(); got != 3 {
		t.Errorf("default: %d pooled connections a peer, want 3", got)
	}
	if got := startOne(t, RaftConfig{TransportPool: 5}).PooledConns(); got != 5 {
		t.Errorf("TransportPool 5: %d pooled connections a peer", got)
	}
}

func TestLogLinesKeepTheirLevel(t *testing.T) {
	for line, want := range map[string]struct {
		level slog.Level
		msg   string
	}{
		"[DEBUG] memberlist: Stream connection from=127.0.0.1:1\n":              {slog.LevelDebug, "memberlist: Stream connection from=127.0.0.1:1"},
		"[ERR] memberlist: Failed to send\n":                                    {slog.LevelError, "memberlist: Failed to send"},
		"2026-12-01T10:00:00.000Z [WARN]  raft: heartbeat timeout reached\n":    {slog.LevelWarn, "raft: heartbeat timeout reached"},
		"2026-12-01T10:00:00.000Z [INFO]  raft: entering follower state: x=1\n": {slog.LevelInfo, "raft: entering follower state: x=1"},
		"2026-12-01T10:00:00.000Z [ERROR] raft: failed to appendEntries\n":      {slog.LevelError, "raft: failed to appendEntries"},
		"no tag at all": {slog.LevelInfo, "no tag at all"},
	} {
		level, msg := parseLogLine(line)
		if level != want.level || msg != want.msg {
			t.Errorf("%q: %v %q, want %v %q", line, level, msg, want.level, want.msg)
		}
	}
}

// Raft's and memberlist's errors are about peers: logged at most at WARN
// (the node's own failures are raftmq's ERROR lines); debug stays debug.
func TestLibraryLinesAreAtMostWarnings(t *testing.T) {
	var got []slog.Level
	w := slogWriter{slog.New(levelRecorder{&got}), "raft"}
	for _, line := range []string{"[ERROR] raft: failed to heartbeat\n", "[DEBUG] memberlist: stream\n", "[WARN] raft: slow\n"} {
		w.Write([]byte(line))
	}
	if want := []slog.Level{slog.LevelWarn, slog.LevelDebug, slog.LevelWarn}; !slices.Equal(got, want) {
		t.Fatalf("levels %v, want %v", got, want)
	}
}

// levelRecorder is a slog handler that records each record's level.
type levelRecorder struct{ levels *[]slog.Level }

func (h levelRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h levelRecorder) Handle(_ context.Context, r slog.Record) error {
	*h.levels = append(*h.levels, r.Level)
	return nil
}
func (h levelRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h levelRecorder) WithGroup(string) slog.Handler      { return h }
