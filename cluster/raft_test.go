package cluster

import (
	"errors"
	"io"
	"log/slog"
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
