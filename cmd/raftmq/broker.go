package main

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/raftmq/raftmq/broker"
	"github.com/raftmq/raftmq/storage"
)

// brokerFlags are `raftmq broker`'s settings; a YAML file (--config) may
// set them too, under the same names, and flags given on the command line
// win over it.
type brokerFlags struct {
	Group           string `yaml:"group"`
	ID              int    `yaml:"id"`
	Dir             string `yaml:"dir"`
	GRPC            string `yaml:"grpc"`
	AdvertiseGRPC   string `yaml:"advertise-grpc"`
	Raft            string `yaml:"raft"`
	AdvertiseRaft   string `yaml:"advertise-raft"`
	Peers           string `yaml:"peers"`
	JoinGroup       bool   `yaml:"join-group"`
	Gossip          string `yaml:"gossip"`
	AdvertiseGossip string `yaml:"advertise-gossip"`
	Join            string `yaml:"join"`
	Cluster         string `yaml:"cluster"`
	FlushSync       bool   `yaml:"flush-sync"`
	SerialLeaderLog bool   `yaml:"raft-serial-leader-log"`
	SegmentSize     string `yaml:"segment-size"`
	HTTP            string `yaml:"http"`
	Pprof           bool   `yaml:"pprof"`
	Preallocate     string `yaml:"preallocate-ahead"`
	PreallocateIdle string `yaml:"preallocate-idle"`
	PreallocateBy   string `yaml:"preallocate-by"`
	RaftTimeout     string `yaml:"raft-timeout"`
	LogLevel        string `yaml:"log-level"`
	Retention       string `yaml:"retention"`
	DiskMaxRatio    string `yaml:"disk-max-ratio"`
	SlaveReadLag    string `yaml:"slave-read-lag"`
	YoungQueue      string `yaml:"young-queue-bytes"`
	DelayLevels     string `yaml:"delay-levels"`
	TimerHorizon    string `yaml:"timer-horizon"`
	TimerPrecision  string `yaml:"timer-precision"`
	DedupWindow     string `yaml:"dedup-window"`
	TxTimeout       string `yaml:"transaction-timeout"`
	TxCheckInterval string `yaml:"transaction-check-interval"`
	TxCheckMax      string `yaml:"transaction-check-max"`
	StreamWorkers   string `yaml:"stream-workers"`
	RaftInFlight    string `yaml:"raft-in-flight"`
	SpareFollowers  string `yaml:"raft-spare-followers"`
	GCPercent       string `yaml:"gc-percent"`
	Sysmon          string `yaml:"sysmon"`
	GOMAXPROCS      string `yaml:"gomaxprocs"`
	CPUPlacement    string `yaml:"cpu-placement"`
	GroupCommitWait string `yaml:"group-commit-wait"`
	RaftLog         string `yaml:"raft-log"`
	nodeSecurity    `yaml:",inline"`
}

func brokerCommand() *cobra.Command {
	var f brokerFlags
	var configFile string
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "run one replica of a broker group",
		Long: `Run one replica of a broker group. The replicas of a group form a Raft group:
the leader is the group's master, the others are slaves. --peers lists the
group's Raft addresses by replica id; it bootstraps the group when this
replica has no state yet, and is ignored afterwards.

Example (replica 1 of 3):
  raftmq broker --group broker-a --id 1 --dir data/a1 --grpc 127.0.0.1:10911 \
    --raft 127.0.0.1:10921 --peers 1=127.0.0.1:10921,2=127.0.0.1:10922,3=127.0.0.1:10923`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configFile != "" {
				if err := loadConfigFile(configFile, &f, cmd); err != nil {
					return err
				}
			}
			if err := keepSysmonAwake(f.Sysmon); err != nil {
				return err
			}
			return runBroker(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&configFile, "config", "", "YAML file setting any of these flags by name")
	fl.StringVar(&f.Group, "group", "", "broker group name, e.g. broker-a")
	fl.IntVar(&f.ID, "id", 0, "this replica's id in the group (1..n)")
	fl.StringVar(&f.Dir, "dir", "", "data directory")
	fl.StringVar(&f.GRPC, "grpc", "127.0.0.1:10911", "gRPC listen address")
	fl.StringVar(&f.AdvertiseGRPC, "advertise-grpc", "", "gRPC address clients and peers dial (default --grpc)")
	fl.StringVar(&f.Raft, "raft", "127.0.0.1:10921", "Raft listen address")
	fl.StringVar(&f.AdvertiseRaft, "advertise-raft", "", "Raft address peers dial (default --raft)")
	fl.StringVar(&f.Peers, "peers", "", "the group's Raft addresses: 1=HOST:PORT,2=HOST:PORT,...")
	fl.BoolVar(&f.JoinGroup, "join-group", false, "a new replica of a running group: start empty, without --peers, and wait for `raftmq group add-replica`")
	fl.StringVar(&f.Gossip, "gossip", "", "gossip address (TCP and UDP), where name servers learn about this replica")
	fl.StringVar(&f.AdvertiseGossip, "advertise-gossip", "", "gossip address others reach (default --gossip; a host name is resolved)")
	fl.StringVar(&f.Join, "join", "", "gossip members to join (name servers): HOST:PORT,...")
	fl.StringVar(&f.Cluster, "cluster", "raftmq", "cluster name")
	fl.StringVar(&f.RaftTimeout, "raft-timeout", "1s", "Raft heartbeat and election timeout (the leader lease is half): lower fails over faster, and risks needless elections on a loaded machine")
	fl.StringVar(&f.HTTP, "http", "", "HTTP address for /metrics (Prometheus) and /healthz (off when empty)")
	fl.BoolVar(&f.Pprof, "pprof", false, "also serve Go's profiles at /debug/pprof/ on --http (unauthenticated: for a trusted network)")
	fl.StringVar(&f.Preallocate, "preallocate-ahead", "", "how far ahead of the writer the next commitlog segment's blocks are allocated, e.g. 32MiB, or off (appends go into holes; the page cache behind the writer is still dropped) (default: the store's, 32MiB)")
	fl.StringVar(&f.PreallocateIdle, "preallocate-idle", "", "how far ahead of the writer the next commitlog segment's blocks are allocated while the writer is idle (no append for 50 ms), so that a burst of appends after it finds them ready, e.g. 512MiB, or off (only --preallocate-ahead) (default: the store's, 512MiB, at most a segment)")
	fl.StringVar(&f.PreallocateBy, "preallocate-by", "zeros", "how the next commitlog segment's blocks are allocated: zeros (written, so syncs into them write nothing more: the lowest latency) or fallocate (no data written, so the disk writes each byte once: more throughput where it is the disk's bandwidth that runs out, as in batched publish with the replicas on one disk)")
	fl.StringVar(&f.SegmentSize, "segment-size", "1GiB", "commitlog segment size (every replica of a group must use the same): e.g. 64MiB, 1GiB")
	fl.BoolVar(&f.FlushSync, "flush-sync", false, "fdatasync the commitlog before each apply returns (the Raft log is fsynced either way)")
	fl.BoolVar(&f.SerialLeaderLog, "raft-serial-leader-log", false, "the master writes and syncs its Raft log before it replicates, instead of beside replication (slower; for comparison)")
	fl.StringVar(&f.LogLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.Retention, "retention", "72h", "commitlog segments last written longer ago are deleted (a duration, or off)")
	fl.StringVar(&f.DiskMaxRatio, "disk-max-ratio", "0.75", "while the disk is fuller than this (0 to 1), the oldest segments are deleted whatever their age (1: never)")
	fl.StringVar(&f.SlaveReadLag, "slave-read-lag", "20000", "a consumer more messages than this behind on a queue reads it from a slave (off: always from the master)")
	fl.StringVar(&f.YoungQueue, "young-queue-bytes", "", "a consumer group with no offset on a queue whose first message is among the commitlog's newest this many bytes starts it at 0, as RocketMQ's brokers answer, e.g. 4GiB, or off (default 40% of the machine's memory)")
	fl.StringVar(&f.DelayLevels, "delay-levels", "", `the retry delays of levels 1..n (default RocketMQ's "1s 5s 10s 30s 1m ... 2h"; a first retry waits level 3)`)
	fl.StringVar(&f.TimerHorizon, "timer-horizon", "168h", "how far ahead a timer message may ask to be delivered")
	fl.StringVar(&f.DedupWindow, "dedup-window", "2m", "a message sent again with the same UNIQ_KEY (a producer's retry) within this long of its stored copy is answered with that copy, not stored again (off: never)")
	fl.StringVar(&f.TxTimeout, "transaction-timeout", "6s", "a half message neither committed nor rolled back this long after it was stored is checked back with a producer of its group")
	fl.StringVar(&f.TxCheckInterval, "transaction-check-interval", "30s", "the least time between two check-backs of one half message")
	fl.StringVar(&f.TxCheckMax, "transaction-check-max", "15", "a half message still open after this many check-backs is rolled back (a copy goes to TRANS_CHECK_MAX_TIME_TOPIC)")
	fl.StringVar(&f.TimerPrecision, "timer-precision", "100ms", "a timer message is delivered at its time or up to this much later (the timer ladder's first step)")
	fl.StringVar(&f.RaftInFlight, "raft-in-flight", "1", "AppendEntries the master has in flight to each follower (1: no pipelining)")
	fl.StringVar(&f.SpareFollowers, "raft-spare-followers", "auto", spareFollowersUsage)
	fl.StringVar(&f.StreamWorkers, "stream-workers", "64", "goroutines kept to run RPCs on warm stacks (more RPCs at once get their own); 0: none")
	fl.StringVar(&f.GroupCommitWait, "group-commit-wait", "2ms", "how long, at most, the next Raft entry waits for the senders of the last one to come back with their next sends rather than go out with fewer (a lone sender never waits, nor an entry that expects fewer than 4 sends), or off; raftmq_group_commit_wait_seconds shows the waits and how they ended")
	fl.StringVar(&f.RaftLog, "raft-log", "auto", "where the replica keeps its Raft log: commitlog (each entry in the commitlog, its messages written once), wal (raft-wal, beside the store), or auto: the one its data directory holds, the commitlog for a new one, and the commitlog for one on a WAL whose group is moving its Raft log there (raftmq group move-raft-log), which it moves as it starts. A replica keeps the one it began with, and a group's replicas keep it in one place")
	fl.StringVar(&f.GCPercent, "gc-percent", "100", "Go's GOGC for this process: the heap grows this much (in %) over what is live before a collection; the GOGC variable, when set, wins")
	fl.StringVar(&f.Sysmon, "sysmon", "awake", sysmonUsage)
	fl.StringVar(&f.GOMAXPROCS, "gomaxprocs", "auto", gomaxprocsUsage)
	fl.StringVar(&f.CPUPlacement, "cpu-placement", "auto", cpuPlacementUsage)
	f.nodeSecurity.flags(cmd)
	return cmd
}

// loadConfigFile fills f from a YAML file, leaving flags set on the command
// line as they are.
func loadConfigFile(path string, f *brokerFlags, cmd *cobra.Command) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var fromFile brokerFlags
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&fromFile); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	set := func(name string, dst *string, v string) {
		if !cmd.Flags().Changed(name) && v != "" {
			*dst = v
		}
	}
	set("group", &f.Group, fromFile.Group)
	set("dir", &f.Dir, fromFile.Dir)
	set("grpc", &f.GRPC, fromFile.GRPC)
	set("advertise-grpc", &f.AdvertiseGRPC, fromFile.AdvertiseGRPC)
	set("raft", &f.Raft, fromFile.Raft)
	set("advertise-raft", &f.AdvertiseRaft, fromFile.AdvertiseRaft)
	set("peers", &f.Peers, fromFile.Peers)
	set("gossip", &f.Gossip, fromFile.Gossip)
	set("join", &f.Join, fromFile.Join)
	set("advertise-gossip", &f.AdvertiseGossip, fromFile.AdvertiseGossip)
	set("cluster", &f.Cluster, fromFile.Cluster)
	set("log-level", &f.LogLevel, fromFile.LogLevel)
	set("segment-size", &f.SegmentSize, fromFile.SegmentSize)
	set("http", &f.HTTP, fromFile.HTTP)
	set("preallocate-ahead", &f.Preallocate, fromFile.Preallocate)
	set("preallocate-idle", &f.PreallocateIdle, fromFile.PreallocateIdle)
	set("preallocate-by", &f.PreallocateBy, fromFile.PreallocateBy)
	set("raft-timeout", &f.RaftTimeout, fromFile.RaftTimeout)
	set("retention", &f.Retention, fromFile.Retention)
	set("disk-max-ratio", &f.DiskMaxRatio, fromFile.DiskMaxRatio)
	set("slave-read-lag", &f.SlaveReadLag, fromFile.SlaveReadLag)
	set("young-queue-bytes", &f.YoungQueue, fromFile.YoungQueue)
	set("delay-levels", &f.DelayLevels, fromFile.DelayLevels)
	set("timer-horizon", &f.TimerHorizon, fromFile.TimerHorizon)
	set("timer-precision", &f.TimerPrecision, fromFile.TimerPrecision)
	set("dedup-window", &f.DedupWindow, fromFile.DedupWindow)
	set("transaction-timeout", &f.TxTimeout, fromFile.TxTimeout)
	set("transaction-check-interval", &f.TxCheckInterval, fromFile.TxCheckInterval)
	set("transaction-check-max", &f.TxCheckMax, fromFile.TxCheckMax)
	set("stream-workers", &f.StreamWorkers, fromFile.StreamWorkers)
	set("raft-in-flight", &f.RaftInFlight, fromFile.RaftInFlight)
	set("raft-spare-followers", &f.SpareFollowers, fromFile.SpareFollowers)
	set("gc-percent", &f.GCPercent, fromFile.GCPercent)
	set("sysmon", &f.Sysmon, fromFile.Sysmon)
	set("gomaxprocs", &f.GOMAXPROCS, fromFile.GOMAXPROCS)
	set("cpu-placement", &f.CPUPlacement, fromFile.CPUPlacement)
	set("group-commit-wait", &f.GroupCommitWait, fromFile.GroupCommitWait)
	set("raft-log", &f.RaftLog, fromFile.RaftLog)
	if !cmd.Flags().Changed("id") && fromFile.ID != 0 {
		f.ID = fromFile.ID
	}
	if !cmd.Flags().Changed("flush-sync") && fromFile.FlushSync {
		f.FlushSync = true
	}
	if !cmd.Flags().Changed("raft-serial-leader-log") && fromFile.SerialLeaderLog {
		f.SerialLeaderLog = true
	}
	if !cmd.Flags().Changed("pprof") && fromFile.Pprof {
		f.Pprof = true
	}
	if !cmd.Flags().Changed("join-group") && fromFile.JoinGroup {
		f.JoinGroup = true
	}
	f.nodeSecurity.fill(cmd, fromFile.nodeSecurity)
	return nil
}

// parsePeers reads "1=HOST:PORT,2=HOST:PORT".
func parsePeers(s string) (map[string]string, error) {
	peers := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		id, addr, ok := strings.Cut(p, "=")
		if n, err := strconv.Atoi(id); !ok || err != nil || n < 1 || addr == "" {
			return nil, fmt.Errorf("--peers: %q is not ID=HOST:PORT with ID >= 1", p)
		}
		if _, dup := peers[id]; dup {
			return nil, fmt.Errorf("--peers: replica %s listed twice", id)
		}
		peers[id] = addr
	}
	return peers, nil
}

// retentionAndReads sets --retention, --disk-max-ratio, --slave-read-lag
// and --young-queue-bytes on cfg.
func (f brokerFlags) retentionAndReads(cfg *broker.Config) error {
	switch f.Retention {
	case "off":
		cfg.Store.RetentionAge = -1
	default:
		d, err := time.ParseDuration(f.Retention)
		if err != nil || d < time.Minute {
			return fmt.Errorf("--retention %q: want a duration of at least 1m (e.g. 72h), or off", f.Retention)
		}
		cfg.Store.RetentionAge = d
	}
	r, err := strconv.ParseFloat(f.DiskMaxRatio, 64)
	if err != nil || r <= 0 || r > 1 {
		return fmt.Errorf("--disk-max-ratio %q: want a number above 0, at most 1 (1: never by disk use)", f.DiskMaxRatio)
	}
	cfg.Store.RetentionDiskRatio = r
	switch f.SlaveReadLag {
	case "off":
		cfg.SlaveReadLag = -1
	default:
		n, err := strconv.ParseInt(f.SlaveReadLag, 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("--slave-read-lag %q: want a positive number of messages, or off", f.SlaveReadLag)
		}
		cfg.SlaveReadLag = n
	}
	switch f.YoungQueue {
	case "":
	case "off":
		cfg.YoungQueueBytes = -1
	default:
		n, err := parseSize(f.YoungQueue)
		if err != nil {
			return fmt.Errorf("--young-queue-bytes: %w, or off", err)
		}
		cfg.YoungQueueBytes = n
	}
	return nil
}

func runBroker(ctx context.Context, f brokerFlags) error {
	log, err := newLogger(f.LogLevel)
	if err != nil {
		return err
	}
	if f.Group == "" || f.ID < 1 || f.Dir == "" {
		return fmt.Errorf("--group, --id (>= 1) and --dir are required")
	}
	peers, err := parsePeers(f.Peers)
	if err != nil {
		return err
	}
	if f.JoinGroup && len(peers) > 0 {
		return fmt.Errorf("--join-group and --peers: a joining replica learns the group from its master, not from --peers")
	}
	ownRaft := firstNonEmpty(f.AdvertiseRaft, f.Raft) // this replica's Raft address, as its peers dial it
	if len(peers) == 0 {
		// A group of one: still a Raft group, on the same code path.
		peers[strconv.Itoa(f.ID)] = ownRaft
	}
	cfg := broker.Config{
		DelayLevels:   f.DelayLevels,
		Group:         f.Group,
		ReplicaID:     int32(f.ID),
		Dir:           f.Dir,
		GRPCAddr:      f.GRPC,
		AdvertiseGRPC: f.AdvertiseGRPC,
		HTTPAddr:      f.HTTP,
		HTTPProfiling: f.Pprof,
		RaftMetrics:   true, // one replica a process: its raft_* and memberlist_* timings on /metrics
		HTTPTLS:       f.HTTPTLS,
		Logger:        log,
	}
	cfg.Raft.BindAddr = f.Raft
	cfg.Raft.AdvertiseAddr = f.AdvertiseRaft
	cfg.Raft.Peers = peers
	cfg.Raft.JoinGroup = f.JoinGroup
	rt, err := time.ParseDuration(f.RaftTimeout)
	if err != nil || rt < 20*time.Millisecond {
		return fmt.Errorf("--raft-timeout %q: want a duration of at least 20ms", f.RaftTimeout)
	}
	cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout, cfg.Raft.LeaderLeaseTimeout = rt, rt, rt/2
	if cfg.TimerHorizon, err = time.ParseDuration(f.TimerHorizon); err != nil || cfg.TimerHorizon <= 0 {
		return fmt.Errorf("--timer-horizon %q: want a positive duration", f.TimerHorizon)
	}
	if cfg.TimerPrecision, err = time.ParseDuration(f.TimerPrecision); err != nil || cfg.TimerPrecision < time.Millisecond {
		return fmt.Errorf("--timer-precision %q: want a duration of at least 1ms", f.TimerPrecision)
	}
	cfg.GroupCommitWait = -1
	if f.GroupCommitWait != "off" {
		if cfg.GroupCommitWait, err = time.ParseDuration(f.GroupCommitWait); err != nil || cfg.GroupCommitWait <= 0 || cfg.GroupCommitWait > time.Second {
			return fmt.Errorf("--group-commit-wait %q: want a duration up to 1s, or off", f.GroupCommitWait)
		}
	}
	cfg.DedupWindow = -1
	if f.DedupWindow != "off" {
		if cfg.DedupWindow, err = time.ParseDuration(f.DedupWindow); err != nil || cfg.DedupWindow <= 0 {
			return fmt.Errorf("--dedup-window %q: want a positive duration, or off", f.DedupWindow)
		}
	}
	if cfg.TransactionTimeout, err = time.ParseDuration(f.TxTimeout); err != nil || cfg.TransactionTimeout <= 0 {
		return fmt.Errorf("--transaction-timeout %q: want a positive duration", f.TxTimeout)
	}
	if cfg.TransactionCheckInterval, err = time.ParseDuration(f.TxCheckInterval); err != nil || cfg.TransactionCheckInterval <= 0 {
		return fmt.Errorf("--transaction-check-interval %q: want a positive duration", f.TxCheckInterval)
	}
	checks, err := strconv.Atoi(f.TxCheckMax)
	if err != nil || checks < 1 || checks > 1<<20 {
		return fmt.Errorf("--transaction-check-max %q: want a number of checks, at least 1", f.TxCheckMax)
	}
	cfg.TransactionCheckMax = int32(checks)
	workers, err := strconv.Atoi(f.StreamWorkers)
	if err != nil || workers < 0 || workers > 1<<16 {
		return fmt.Errorf("--stream-workers %q: want a number of goroutines, 0 to 65536", f.StreamWorkers)
	}
	cfg.StreamWorkers = workers
	if workers == 0 {
		cfg.StreamWorkers = -1 // the config's "none"
	}
	inFlight, err := strconv.Atoi(f.RaftInFlight)
	if err != nil || inFlight < 1 || inFlight > 64 {
		return fmt.Errorf("--raft-in-flight %q: want a number of requests, 1 to 64", f.RaftInFlight)
	}
	cfg.Raft.MaxRPCsInFlight = inFlight
	if cfg.Raft.SpareFollowerInterval, err = spareFollowerInterval(f.SpareFollowers, ownRaft, peers); err != nil {
		return err
	}
	if cfg.Raft.SpareFollowerInterval > 0 {
		log.Info("spare followers paced", "interval", cfg.Raft.SpareFollowerInterval, "mode", f.SpareFollowers)
	}
	if err := setGCPercent(f.GCPercent); err != nil {
		return err
	}
	if err := setGOMAXPROCS(f.GOMAXPROCS, ownRaft, peers, log); err != nil {
		return err
	}
	if err := checkCPUPlacement(f.CPUPlacement); err != nil {
		return err
	}
	cfg.Gossip = broker.GossipConfig{BindAddr: f.Gossip, AdvertiseAddr: f.AdvertiseGossip, Join: splitList(f.Join), Cluster: f.Cluster}
	if cfg.TLS, cfg.Gossip.SecretKey, err = f.nodeSecurity.load(); err != nil {
		return err
	}
	if cfg.ACL, err = f.nodeSecurity.loadACL(cfg.TLS, log); err != nil {
		return err
	}
	cfg.DisableRemoting = f.NoRemoting
	if cfg.ACL != nil {
		defer cfg.ACL.Close()
	}
	if err := f.nodeSecurity.checkPlaintext(cfg.TLS != nil, cfg.Gossip.SecretKey != nil,
		map[string]string{"grpc": f.GRPC, "raft": f.Raft}, map[string]string{"gossip": f.Gossip}); err != nil {
		return err
	}
	cfg.Raft.SerialLeaderLog = f.SerialLeaderLog
	switch f.RaftLog {
	case "wal":
	case "commitlog":
		cfg.Store.RaftLog = true
	case "auto":
		cfg.RaftLogFromDir = true
	default:
		return fmt.Errorf("--raft-log %q: want auto, commitlog or wal", f.RaftLog)
	}
	if f.FlushSync {
		cfg.Store.FlushMode = storage.FlushSync
	}
	if cfg.Store.SegmentSize, err = parseSize(f.SegmentSize); err != nil {
		return fmt.Errorf("--segment-size: %w", err)
	}
	if err := f.preallocation(&cfg.Store); err != nil {
		return err
	}
	if err := f.retentionAndReads(&cfg); err != nil {
		return err
	}
	b, err := broker.Start(cfg)
	if err != nil {
		return err
	}
	fmt.Printf("broker %s replica %d serving gRPC on %s\n", f.Group, f.ID, b.Addr())
	placing, stopPlacing := context.WithCancel(ctx)
	placed := startCPUPlacement(placing, f.CPUPlacement, ownRaft, peers, b.IsMaster, log)
	defer func() { stopPlacing(); placed() }()

	waitForSignal(ctx, log)
	// Hand the master role over first, so writers wait for no election.
	done := make(chan error, 1)
	go func() { done <- b.TransferLeadership() }()
	select {
	case err := <-done:
		if err != nil {
			log.Warn("leadership transfer failed", "err", err)
		}
	case <-time.After(5 * time.Second):
		log.Warn("leadership transfer timed out")
	}
	return b.Close()
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// parseSize reads sizes like 1GiB, 64MiB, 512KiB or a plain byte count.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v < 1 {
				return 0, fmt.Errorf("%q is not a size", s)
			}
			return v * u.mult, nil
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("%q is not a size (e.g. 64MiB)", s)
	}
	return v, nil
}

// setGCPercent sets the collector's target (GOGC) from --gc-percent, unless
// the GOGC variable is set: it wins, as for any Go program. The default is
// Go's 100. 200 was measured (deploy/bench-local.sh, 4 interleaved pairs,
// 2026-12-03): the master's CPU per message 0.81-1.04x batched and
// 0.69-1.04x under 16 sync senders, one sender's p50 0.51-1.72x, for 40%
// more peak anonymous memory (93 to 135 MB a broker): not clear enough on
// this machine to change the default (broker/README.md).
func setGCPercent(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 25 || n > 10000 {
		return fmt.Errorf("--gc-percent %q: want a percentage, 25 to 10000", v)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(n)
	}
	return nil
}

// preallocation sets how the store prepares the next commitlog segment:
// --preallocate-ahead, --preallocate-idle and --preallocate-by.
func (f brokerFlags) preallocation(cfg *storage.Config) error {
	for _, size := range []struct {
		flag, value string
		to          *int64
	}{
		{"--preallocate-ahead", f.Preallocate, &cfg.PreallocateAhead},
		{"--preallocate-idle", f.PreallocateIdle, &cfg.PreallocateIdle},
	} {
		switch size.value {
		case "":
		case "off":
			*size.to = -1
		default:
			n, err := parseSize(size.value)
			if err != nil {
				return fmt.Errorf("%s: %w", size.flag, err)
			}
			*size.to = n
		}
	}
	switch f.PreallocateBy {
	case "zeros", "":
	case "fallocate":
		cfg.PreallocateBy = storage.PreallocateFallocate
	default:
		return fmt.Errorf("--preallocate-by %q: want zeros or fallocate", f.PreallocateBy)
	}
	return nil
}
