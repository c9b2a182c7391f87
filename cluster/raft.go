package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/raftmq/raftmq/internal/defaults"
)

// RaftConfig configures one member of a Raft group. Zero fields take the
// documented defaults (hashicorp/raft's production defaults for timings).
type RaftConfig struct {
	// ID is this member's id within the group (a broker's replica id).
	ID string
	// Dir holds the Raft log (wal/, hashicorp/raft-wal; or, with EntryLog,
	// only a marker that the log is in the commitlog), the stable store
	// (raft.db, raft-boltdb/v2: term and vote) and snapshots/, all fsynced.
	Dir string
	// BindAddr is the host:port of the Raft TCP transport.
	BindAddr string
	// AdvertiseAddr is what peers dial; default BindAddr (which must then
	// not be a wildcard address).
	AdvertiseAddr string
	// Peers is the group's membership, id to Raft address, this member
	// included. It bootstraps the group when this member has no Raft
	// state; afterwards the Raft configuration in the log rules.
	Peers map[string]string
	// JoinGroup starts a member with no Raft state without bootstrapping:
	// it waits for the group's master to add it (AddReplica). Peers is
	// then unused.
	JoinGroup bool

	// Timings: defaults 1 s heartbeat and election timeouts, 500 ms leader
	// lease, 50 ms commit timeout. Tests use tens of milliseconds.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// MaxAppendEntries caps entries per AppendEntries RPC and per log
	// store batch. Default 256 (hashicorp/raft's limit is 1024).
	MaxAppendEntries int
	// SnapshotInterval and SnapshotThreshold: Raft checks every interval to
	// twice that, and snapshots when threshold entries came since the last
	// one. Defaults 2 s, 1024 (hashicorp/raft's are 120 s, 8192).
	//
	// A start reads every entry after the newest snapshot twice: NewRaft
	// for configuration changes, then the state machine's replay, which a
	// new master's Barrier waits for. The check's timer starts with the
	// process, so a member restarted more often than every 120-240 s never
	// snapshotted: in the long power-loss drill (RAFTMQ_E2E_LONG=1 go test
	// -run PowerLossRepeated ./e2e) no member ever did; NewRaft grew to
	// 1.2-2.9 s at 16-24k entries, and a new master's Barrier to 3.4 s.
	// This state machine's snapshot is cheap: its metadata and a store
	// checkpoint (the store checkpoints every second anyway), not the
	// commitlog; in that drill the copy of the metadata took at most
	// 0.6 ms of the state machine's time, and the rest 2-147 ms in the
	// background. So the snapshots follow the entries closely: a member
	// that lived past its first check starts reading about the threshold
	// and 4 s of entries at most (the drill: at most 2.4k entries, NewRaft
	// 0.002-0.09 s, the Barrier 0.002-0.11 s). The log keeps TrailingLogs
	// entries before the snapshot, so it reaches less far back than when
	// snapshots were minutes apart: a follower away for more than
	// TrailingLogs entries is sent a snapshot (and copies the commitlog,
	// catchup.go).
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	// TrailingLogs kept after a snapshot, so a briefly absent follower
	// catches up from the log instead of a snapshot. Default 10240.
	TrailingLogs uint64
	// SnapshotsRetained on disk. Default 2.
	SnapshotsRetained int
	// TransportTimeout bounds one Raft RPC (a snapshot install scales it by
	// the snapshot's size). Default 10 s.
	TransportTimeout time.Duration
	// TransportPool is the number of pooled connections per peer, of each
	// kind (appendstream.go). Default 3.
	TransportPool int
	// MaxEntryBytes is the largest entry (its data and extensions) the
	// member takes from a leader's AppendEntries: a request with a larger
	// one is refused and its connection closed, before anything is
	// allocated for it. Default 64 MiB; raftmq broker raises it to twice
	// its EntryMaxBytes where that is larger.
	MaxEntryBytes int
	// LogSegmentSize is the size of one Raft log segment file. Default
	// 8 MiB (raft-wal's is 64 MiB).
	//
	// raft-wal v0.4.2's Open reads the open (tail) segment through to find
	// its last commit: an 8-byte read of every frame's header, one ReadAt
	// each, until zeros (segment/writer.go, recoverTail and
	// readThroughSegment), then the last batch again for its CRC. Neither
	// snapshots nor compaction shorten the tail: only its size bounds that
	// read. A 64 MiB tail of 24,000 2 KiB entries took 0.15 s to open on
	// ext4 with the page cache dropped (0.017 s warm), the time of reading
	// 64 MiB cold, which a power cut leaves; 8 MiB is an eighth of that.
	// The price is a rotation every 8 MiB instead of 64 (a wal-meta.db
	// commit, a new file and its directory's sync: a few fsyncs of about
	// 0.2 ms here), some 10 a second at 80 MB/s of log (75k msgs/s of
	// 1 KiB): not measured.
	LogSegmentSize int
	// MaxRPCsInFlight is how many AppendEntries a leader has in flight to
	// one follower (hashicorp/raft's NetworkTransportConfig); 1, the
	// default, turns pipelining off. hashicorp/raft v1.7.3's own pipeline
	// can wedge a follower's replication and the leader's shutdown; the
	// member runs its pipelines through steadyPipeline (pipeline.go),
	// which cannot. Pipelining is for followers a long round trip away:
	// on loopback it did not pay (2026-12-02, in process, 16 senders × 32
	// messages a send: 28.5k, 28.2k, 30.0k msgs/s at 4 against 32.0k,
	// 35.7k, 29.5k at 1, interleaved; 256 senders: 29.0k, 41.5k, 39.0k
	// against 42.8k, 34.5k, 40.3k; on 3 broker processes no difference
	// beyond the runs' ±30%). Earlier, before the leader's log was
	// written beside replication, 2 gave 38.7k against 33.2k.
	MaxRPCsInFlight int
	// SpareFollowerInterval, when positive, is how often a follower that a
	// commit does not wait for (in a group of three, the follower behind
	// the other) gets the entries that came since it was last sent some,
	// in one request (sparefollowers.go). Default 0, off: every follower
	// gets each entry at once, as hashicorp/raft sends them. raftmq broker
	// sets 5ms where the group's replicas all run on one host
	// (--raft-spare-followers auto, cmd/raftmq/sparefollowers.go).
	// Off with SerialLeaderLog, and for requests that go through a
	// pipeline (MaxRPCsInFlight over 1), and for requests carrying an
	// entry of spareLargeEntry (8 KiB) or more. A leader that steps down
	// or shuts down lets a held request go within sparePatience.
	SpareFollowerInterval time.Duration
	// AppliedIndex is the index of the last entry the state machine holds
	// on its own disk. A log that, with its newest snapshot, ends before
	// it lost entries it had synced, and the member refuses to start
	// (checkLogHolds).
	AppliedIndex uint64
	// SerialLeaderLog makes the leader write and sync its own log before
	// it replicates (hashicorp/raft's own order) instead of beside
	// replication (leaderlog.go): for measuring the difference, and as a
	// way back.
	SerialLeaderLog bool
	// wrapLog, in tests, wraps the WAL (a disk that stalls or fails).
	wrapLog func(raft.LogStore) raft.LogStore
	// EntryLog, when set, is the Raft log instead of the WAL: a broker's
	// commitlog (commitloglog.go; docs/commitlog-raft-log.md), whose
	// command entries' data RecordsAt splits into a head and records. The
	// state machine then dispatches what the log stored rather than
	// writing it. The member does not close it: its owner does, after
	// Close. Default nil: the WAL under Dir.
	EntryLog  EntryLog
	RecordsAt RecordsAt

	// TLS, when set, runs the transport over mutual TLS (raftstream.go):
	// it dials and accepts only certificates that name a replica of Group
	// in Cluster. Without it the transport is plain TCP, for loopback and
	// trusted networks: anyone who reaches the port can speak Raft.
	TLS            *TLS
	Cluster, Group string

	// Logger receives Raft's logs at LogLevel and above. Default
	// slog.Default(), level "warn".
	Logger   *slog.Logger
	LogLevel string
}

func (c RaftConfig) withDefaults() (RaftConfig, error) {
	if c.ID == "" || c.Dir == "" || c.BindAddr == "" {
		return c, errors.New("cluster: RaftConfig needs ID, Dir and BindAddr")
	}
	defaults.IfZero(&c.AdvertiseAddr, c.BindAddr)
	defaults.IfZero(&c.HeartbeatTimeout, time.Second)
	defaults.IfZero(&c.ElectionTimeout, time.Second)
	defaults.IfZero(&c.LeaderLeaseTimeout, 500*time.Millisecond)
	defaults.IfZero(&c.CommitTimeout, 50*time.Millisecond)
	defaults.IfZero(&c.MaxAppendEntries, 256)
	defaults.IfZero(&c.SnapshotInterval, 2*time.Second)
	defaults.IfZero(&c.SnapshotThreshold, 1024)
	defaults.IfZero(&c.TrailingLogs, 10240)
	defaults.IfZero(&c.SnapshotsRetained, 2)
	defaults.IfZero(&c.TransportTimeout, 10*time.Second)
	defaults.IfZero(&c.TransportPool, 3)
	defaults.IfZero(&c.MaxEntryBytes, 64<<20)
	defaults.IfZero(&c.LogSegmentSize, 8<<20)
	defaults.IfZero(&c.MaxRPCsInFlight, 1)
	defaults.IfZero(&c.Logger, slog.Default())
	defaults.IfZero(&c.LogLevel, "warn")
	return c, nil
}

// newTransport is the member's Raft transport (appendstream.go): plain
// TCP, or mutual TLS with cfg.TLS.
func newTransport(cfg RaftConfig, adv *net.TCPAddr, hlog hclog.Logger) (*memberTransport, error) {
	tc := &raft.NetworkTransportConfig{
		MaxPool:         cfg.TransportPool,
		Timeout:         cfg.TransportTimeout,
		Logger:          hlog,
		MaxRPCsInFlight: cfg.MaxRPCsInFlight,
	}
	limits := appendLimits{entryBytes: cfg.MaxEntryBytes}
	log := cfg.Logger.With("member", cfg.ID)
	if cfg.TLS == nil {
		stream, err := newTCPStream(cfg.BindAddr, adv)
		if err != nil {
			return nil, err
		}
		return newMemberTransport(stream, tc, limits, log), nil
	}
	if cfg.Cluster == "" || cfg.Group == "" {
		return nil, errors.New("cluster: a TLS transport needs the Cluster and Group its members' certificates name")
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		return nil, fmt.Errorf("cluster: advertise address %s is not one peers can dial", adv)
	}
	stream, err := newTLSStream(cfg.BindAddr, adv, cfg.TLS, Want{Cluster: cfg.Cluster, Role: IdentityBroker, Group: cfg.Group}, log)
	if err != nil {
		return nil, err
	}
	return newMemberTransport(stream, tc, limits, log), nil
}

// logCacheEntries is how many of the newest Raft entries stay in memory
// for replication (each at most the broker's entry size cap).
const logCacheEntries = 64

// RaftNode is a started member of a Raft group with its stores and
// transport, and the channel that reports leadership changes.
type RaftNode struct {
	Raft *raft.Raft
	// LeaderChanges receives true when this member becomes leader and false
	// when it stops being leader (raft.Config.NotifyCh, buffered). One loop
	// must read it all the time: Raft blocks when it is full.
	LeaderChanges <-chan bool

	transport *memberTransport
	pool      int // TransportPool: connections pooled per peer
	logStore  memberLog
	log       *leaderLog  // logStore as Raft writes it (leaderlog.go)
	checked   *checkedLog // logStore as replication reads it (entrychecksum.go)
	boltStore *raftboltdb.BoltStore
	stable    *closingStable // boltStore as Raft's stable store, closed safely (stablestore.go)
	stopped   atomic.Bool

	// Started says how long StartRaft's steps took.
	Started StartTimes
}

// StartTimes are how long StartRaft's steps took, and how much of the log
// it read, for the broker's start line. Two of them grow with the log:
// raft-wal's Open reads every frame header of the tail segment (one
// 8-byte read a frame), and hashicorp/raft's NewRaft reads every entry
// after the newest snapshot for configuration changes (the same entries
// the state machine then replays before a new master's Barrier). Over the
// long power-loss drill's 20 rounds, with no snapshot ever taken, the
// log's open grew from 0.015 s to 1.5-2.6 s and NewRaft from 0.002 s to
// 1.2-2.9 s at 16-24k entries (see SnapshotInterval and LogSegmentSize;
// most of the open's time was lazyfs's, e2e/lazyfs attrTimeout).
type StartTimes struct {
	StableOpen time.Duration // raft.db (bolt)
	LogOpen    time.Duration // the WAL, its tail segment read through
	// SnapshotsOpen is the snapshot store's open and checkLogHolds.
	SnapshotsOpen time.Duration
	// NewRaft is hashicorp/raft's NewRaft: Restore, then the read of the
	// entries after the snapshot.
	NewRaft time.Duration
	// Restore is the state machine's restore of the newest snapshot (a
	// commitlog catch-up from a peer included), part of NewRaft.
	Restore time.Duration
	// EntriesAfterSnapshot is how many entries NewRaft read: the log's
	// last index less the newest snapshot's.
	EntriesAfterSnapshot uint64
}

// StartRaft opens the member's stores, starts its transport and Raft, and
// bootstraps the group from Peers when this member has no state yet.
func StartRaft(cfg RaftConfig, fsm raft.FSM) (*RaftNode, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: create raft dir: %w", err)
	}
	hlog := hclog.New(&hclog.LoggerOptions{
		Name:   "raft",
		Level:  hclog.LevelFromString(cfg.LogLevel),
		Output: slogWriter{cfg.Logger.With("member", cfg.ID), "raft"},
	})

	var times StartTimes
	stepBegan := time.Now()
	step := func(d *time.Duration) {
		now := time.Now()
		*d = now.Sub(stepBegan)
		stepBegan = now
	}
	if err := claimLogPlace(cfg); err != nil {
		return nil, err
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(cfg.Dir, boltFileName),
		// The map freelist is not written on every commit: bolt's commits
		// stay small as the file grows.
		BoltOptions: &bbolt.Options{Timeout: 5 * time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: open raft stable store: %w", err)
	}
	step(&times.StableOpen)
	// closeAll undoes what was opened so far when a later step fails.
	var closers []io.Closer
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i].Close()
		}
		bolt.Close()
	}
	logStore, logName, err := openMemberLog(cfg, bolt, hlog)
	if err != nil {
		bolt.Close()
		return nil, err
	}
	closers = append(closers, logStore)
	step(&times.LogOpen)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, cfg.SnapshotsRetained, hlog)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("cluster: open snapshot store: %w", err)
	}
	own, err := snaps.List()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("cluster: list snapshots: %w", err)
	}
	if cfg.EntryLog != nil {
		if err := cfg.EntryLog.IndexAtStart(len(own) > 0); err != nil {
			closeAll()
			return nil, fmt.Errorf("cluster: index the raft entries in the commitlog: %w", err)
		}
	}
	if err := checkLogHolds(logName, logStore, snaps, cfg.AppliedIndex); err != nil {
		closeAll()
		return nil, err
	}
	step(&times.SnapshotsOpen)
	adv, err := net.ResolveTCPAddr("tcp", cfg.AdvertiseAddr)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("cluster: advertise address %q: %w", cfg.AdvertiseAddr, err)
	}
	transport, err := newTransport(cfg, adv, hlog)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("cluster: raft transport on %s: %w", cfg.BindAddr, err)
	}
	closers = append(closers, transport)

	notify := make(chan bool, 16)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = hlog
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.MaxAppendEntries = cfg.MaxAppendEntries
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.NotifyCh = notify
	rc.BatchApplyCh = true
	// Raft's timings per follower only with a peer_id label
	// (raft_replication_appendEntries_rpc{peer_id="2"}), not also under a
	// name of their own per peer (raft_replication_appendEntries_rpc_2),
	// which doubled the leader's emissions and its series on /metrics.
	rc.NoLegacyTelemetry = true
	if err := raft.ValidateConfig(rc); err != nil {
		closeAll()
		return nil, fmt.Errorf("cluster: raft config: %w", err)
	}

	hasState, err := raft.HasExistingState(logStore, bolt, snaps)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("cluster: read raft state: %w", err)
	}
	if !hasState && !cfg.JoinGroup {
		if _, ok := cfg.Peers[cfg.ID]; !ok {
			closeAll()
			return nil, fmt.Errorf("cluster: peers %v do not include this member %s", cfg.Peers, cfg.ID)
		}
		if err := raft.BootstrapCluster(rc, logStore, bolt, snaps, transport, Configuration(cfg.Peers)); err != nil {
			closeAll()
			return nil, fmt.Errorf("cluster: bootstrap raft group: %w", err)
		}
	}
	var inner raft.LogStore = logStore
	if cfg.wrapLog != nil {
		inner = cfg.wrapLog(logStore)
	}
	checked := newCheckedLog(inner, logName) // entrychecksum.go
	log, err := newLeaderLog(checked, logStore.Close)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("cluster: raft log: %w", err)
	}
	closers[0] = log // closes logStore after its writer
	// The leader reads every entry back from the log store once per
	// follower to replicate it; a cache of the newest entries spares those
	// reads and their decoding. Group commit keeps few entries in flight,
	// so a small cache covers them.
	logs, err := raft.NewLogCache(logCacheEntries, log)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("cluster: raft log cache: %w", err)
	}
	stable := newClosingStable(bolt, bolt.Close)
	gate := newHeartbeatGate(transport) // heartbeatgate.go
	spares := newSpareFollowers(cfg.SpareFollowerInterval, log.isLeading, gate.servers)
	var trans raft.Transport = durableCommits{heartbeatGate: gate, log: log, spares: spares}
	failer, _ := fsm.(LogFailer)
	if cfg.SerialLeaderLog {
		trans = steadyTransport{gate}
	} else {
		fsm = durableFSM{FSM: fsm, log: log}
	}
	fsm = checkedFSM{FSM: fsm, walDir: logName, failer: failer}
	timed := &timedRestore{FSM: fsm, atStart: len(own) > 0}
	stepBegan = time.Now()
	r, err := raft.NewRaft(rc, timed, logs, stable, snaps, trans)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	step(&times.NewRaft)
	times.Restore = timed.took()
	gate.running(r)
	if last, err := logStore.LastIndex(); err == nil {
		// What NewRaft restored (an older snapshot when the newest failed).
		snap, _ := strconv.ParseUint(r.Stats()["last_snapshot_index"], 10, 64)
		times.EntriesAfterSnapshot = last - min(snap, last)
	}
	leading := func() bool { return r.State() == raft.Leader }
	checked.leading.Store(&leading)
	if !cfg.SerialLeaderLog {
		log.lead(leading)
	}
	return &RaftNode{Raft: r, LeaderChanges: notify, transport: transport, pool: cfg.TransportPool, logStore: logStore, log: log, checked: checked, boltStore: bolt, stable: stable, Started: times}, nil
}

// timedRestore times the state machine's restores (StartTimes.Restore),
// and marks those of the member's own snapshots at start
// (SnapshotAtStart). It adds no method to the state machine it wraps, so
// Raft sees the same interfaces (no BatchingFSM, no ConfigurationStore)
// as without it.
type timedRestore struct {
	raft.FSM
	mu    sync.Mutex
	total time.Duration
	// atStart: NewRaft restores the member's own snapshots, newest first,
	// until one succeeds (raft api.go restoreSnapshot), before it starts
	// the goroutine that installs a leader's; so every restore until the
	// first that succeeds is of an own snapshot, and every one after it
	// of a leader's. False when there is none to restore.
	atStart bool
}

// ownSnapshot is the reader of a snapshot NewRaft restores at start.
type ownSnapshot struct{ io.ReadCloser }

// SnapshotAtStart says whether a state machine's Restore reads the
// member's own snapshot as Raft restores it when it starts, rather than
// one a leader sent (an install). Peers can be asked for anything only
// during the latter: the member is running.
func SnapshotAtStart(rc io.ReadCloser) bool {
	_, ok := rc.(ownSnapshot)
	return ok
}

func (t *timedRestore) Restore(rc io.ReadCloser) error {
	t.mu.Lock()
	atStart := t.atStart
	t.mu.Unlock()
	if atStart {
		rc = ownSnapshot{rc}
	}
	began := time.Now()
	err := t.FSM.Restore(rc)
	t.mu.Lock()
	t.total += time.Since(began)
	t.atStart = t.atStart && err != nil
	t.mu.Unlock()
	return err
}

func (t *timedRestore) took() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// Configuration is the Raft configuration of peers (id to address), every
// one a voter, in id order.
func Configuration(peers map[string]string) raft.Configuration {
	ids := make([]string, 0, len(peers))
	for id := range peers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		a, errA := strconv.Atoi(ids[i])
		b, errB := strconv.Atoi(ids[j])
		if errA == nil && errB == nil {
			return a < b
		}
		return ids[i] < ids[j]
	})
	var c raft.Configuration
	for _, id := range ids {
		c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(peers[id])})
	}
	return c
}

// LogHolds says whether the Raft log can still give entry index, that is
// whether a follower that needs it can be sent it rather than a snapshot.
// raft-wal drops head-truncated entries a whole segment at a time: entries
// below the log's first index stay readable until their segment goes.
func (n *RaftNode) LogHolds(index uint64) bool {
	var l raft.Log
	return n.logStore.GetLog(index, &l) == nil
}

// PooledConns is how many connections to each peer the transport keeps
// (RaftConfig.TransportPool). A call on one that went stale (the peer
// restarted) fails once and drops it; the next call may take another.
func (n *RaftNode) PooledConns() int { return n.pool }

// Stop shuts Raft down, then the transport: the member leaves its group
// (which still counts it as a voter) as a stopped process would, and its
// stores stay open until Close. Safe to call more than once, and before
// Close.
func (n *RaftNode) Stop() error {
	n.stopped.Store(true)
	err := n.Raft.Shutdown().Error()
	// Closing our pooled connections ends the peers' handlers of them; the
	// transport's Close alone leaves those goroutines blocked in reads.
	n.transport.CloseStreams()
	if terr := n.transport.Close(); err == nil {
		err = terr
	}
	return err
}

// LogFailed is closed when the leader's background write of its Raft log
// failed (leaderlog.go); LogErr says how. The member must stop: Raft was
// told the entries were stored.
func (n *RaftNode) LogFailed() <-chan struct{} { return n.log.Failed() }

func (n *RaftNode) LogErr() error { return n.log.Err() }

// LogDamaged is closed when this member, leading, read a damaged entry of
// its Raft log to send it to a follower (entrychecksum.go); LogDamage
// names it. The member must stop: its log cannot serve its followers.
func (n *RaftNode) LogDamaged() <-chan struct{} { return n.checked.damaged }

func (n *RaftNode) LogDamage() error {
	select {
	case <-n.checked.damaged:
		return n.checked.err
	default:
		return nil
	}
}

// Stopped reports whether Stop (or Close) was called. Ask it rather than
// Raft.State: hashicorp/raft v1.7.3 can say Follower after its Shutdown,
// when an AppendEntries it was handling as it shut down sets the state
// back (raft.go, appendEntries: "Ensure transition to follower").
func (n *RaftNode) Stopped() bool { return n.stopped.Load() }

// Close stops the member (see Stop), then closes the stores: in that
// order, so Raft never writes to a closed store.
func (n *RaftNode) Close() error {
	err := n.Stop()
	if lerr := n.log.Close(); err == nil {
		err = lerr
	}
	if berr := n.stable.Close(); err == nil {
		err = berr
	}
	return err
}

// slogWriter carries hclog's and memberlist's lines into slog, at the
// level each line names ("[DEBUG]", "[WARN]", ...), so the logger's level
// filters them (issue #14: memberlist's debug lines came out at INFO), but
// at most at WARN: their errors are about peers ("failed to heartbeat",
// a peer's connection refused), the trouble the cluster is built to ride
// out, while raftmq logs its own failures, a failed store first, as the
// node's ERROR lines (broker/storefail.go: one clear line).
type slogWriter struct {
	log       *slog.Logger
	component string
}

var _ io.Writer = slogWriter{}

func (w slogWriter) Write(p []byte) (int, error) {
	level, msg := parseLogLine(string(p))
	w.log.Log(context.Background(), min(level, slog.LevelWarn), msg, "component", w.component)
	return len(p), nil
}

// logLevels are the level tags of hclog and memberlist (which says ERR).
var logLevels = []struct {
	tag   string
	level slog.Level
}{
	{"[TRACE]", slog.LevelDebug - 4}, {"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn}, {"[ERROR]", slog.LevelError}, {"[ERR]", slog.LevelError},
}

// parseLogLine finds a line's level tag and returns the level and what
// follows it (the timestamp before it dropped: slog has its own); a line
// without one is INFO, whole.
func parseLogLine(line string) (slog.Level, string) {
	line = strings.TrimRight(line, "\n")
	for _, l := range logLevels {
		if i := strings.Index(line, l.tag); i >= 0 {
			return l.level, strings.TrimSpace(line[i+len(l.tag):])
		}
	}
	return slog.LevelInfo, line
}
