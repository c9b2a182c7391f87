package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftmq/raftmq/broker"
	"github.com/raftmq/raftmq/namesrv"
	"github.com/raftmq/raftmq/storage"
)

// devCommand runs a whole cluster in one process: a name server and
// groups of replicas on 127.0.0.1, at fixed ports (Raft remembers its
// peers' addresses, so a restart must find them where they were), with
// data under --dir.
//
// Ports: devLayout, which `raftmq dev --help` prints.
func devCommand() *cobra.Command {
	var dir, level, delayLevels, sysmon string
	var groups, replicas, port, basePort int
	var withHTTP bool
	var txTimeout, txCheckInterval time.Duration
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "run a whole local cluster in one process (1 name server, 1 group of 3 replicas by default)",
		Long: `Run a whole local cluster in one process, on 127.0.0.1, with data under
--dir: a name server and --groups broker groups (broker-a, broker-b, ...)
of --replicas replicas each. Topics are created on first send. Stop it
with Ctrl-C; started again on the same --dir it comes back with its data.
` + devLayout,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if groups < 1 || groups > 26 || replicas < 1 || replicas > 9 {
				return fmt.Errorf("--groups must be 1..26 and --replicas 1..9")
			}
			if err := keepSysmonAwake(sysmon); err != nil {
				return err
			}
			log, err := newLogger(level)
			if err != nil {
				return err
			}
			nsCfg := namesrv.Config{
				Name: "namesrv-dev", GRPCAddr: fmt.Sprintf("127.0.0.1:%d", port), GossipAddr: fmt.Sprintf("127.0.0.1:%d", port+1),
				FastGossip: true, Logger: log,
			}
			if withHTTP {
				nsCfg.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", port+2)
			}
			ns, err := namesrv.Start(nsCfg)
			if err != nil {
				return err
			}
			defer ns.Close()
			fmt.Printf("namesrv %s\n", ns.Addr())
			if withHTTP {
				fmt.Printf("namesrv metrics http://%s/metrics\n", ns.OpsAddr())
			}

			var brokers []*broker.Broker
			defer func() {
				for _, b := range brokers {
					b.Close()
				}
			}()
			for g := 0; g < groups; g++ {
				name := "broker-" + string(rune('a'+g))
				peers := map[string]string{}
				for r := 1; r <= replicas; r++ {
					peers[strconv.Itoa(r)] = fmt.Sprintf("127.0.0.1:%d", basePort+100*g+10*(r-1)+2)
				}
				for r := 1; r <= replicas; r++ {
					base := basePort + 100*g + 10*(r-1)
					cfg := broker.Config{
						Group: name, ReplicaID: int32(r), Dir: filepath.Join(dir, name, strconv.Itoa(r)),
						GRPCAddr:         fmt.Sprintf("127.0.0.1:%d", base+1),
						AutoCreateTopics: true,
						DelayLevels:      delayLevels,
						// Zero: the broker's defaults (6 s, 30 s).
						TransactionTimeout:       txTimeout,
						TransactionCheckInterval: txCheckInterval,
						// Small segments: a new store zero-fills its first.
						Store:          storage.Config{SegmentSize: 64 << 20},
						RaftLogFromDir: true, // the commitlog, for a new directory
						Gossip: broker.GossipConfig{BindAddr: fmt.Sprintf("127.0.0.1:%d", base+3),
							Join: []string{fmt.Sprintf("127.0.0.1:%d", port+1)}, Fast: true},
						Logger: log,
					}
					if withHTTP {
						cfg.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", base+4)
					}
					cfg.Raft.BindAddr = peers[strconv.Itoa(r)]
					cfg.Raft.Peers = peers
					cfg.Raft.LogLevel = "error"
					b, err := broker.Start(cfg)
					if err != nil {
						return fmt.Errorf("start %s replica %d: %w", name, r, err)
					}
					brokers = append(brokers, b)
					if withHTTP {
						fmt.Printf("%s replica %d metrics http://%s/metrics\n", name, r, b.OpsAddr())
					}
				}
			}
			if err := waitForMasters(cmd.Context(), ns.Addr(), groups, 30*time.Second); err != nil {
				return err
			}
			fmt.Printf("raftmq produce --namesrv %s --topic demo --body hello\n", ns.Addr())
			fmt.Printf("raftmq consume --namesrv %s --topic demo --group demo-group --count 1\n", ns.Addr())
			waitForSignal(cmd.Context(), log)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "dir", "raftmq-data", "data directory")
	fl.IntVar(&groups, "groups", 1, "broker groups")
	fl.IntVar(&replicas, "replicas", 3, "replicas per group")
	fl.IntVar(&port, "port", 9876, "name server gRPC port (gossip on the next)")
	fl.IntVar(&basePort, "base-port", 10900, "first broker port (see the help for the layout)")
	fl.StringVar(&level, "log-level", "warn", "debug, info, warn or error")
	fl.StringVar(&sysmon, "sysmon", "awake", sysmonUsage)
	fl.BoolVar(&withHTTP, "http", false, "serve /metrics and /healthz on every node (ports below)")
	fl.DurationVar(&txTimeout, "transaction-timeout", 6*time.Second, "a half message open this long is checked back with its producer group")
	fl.DurationVar(&txCheckInterval, "transaction-check-interval", 30*time.Second, "the least time between two check-backs of one half message")
	fl.StringVar(&delayLevels, "delay-levels", "", `the retry delays of levels 1..n, e.g. "100ms 200ms 1s" (default RocketMQ's "1s 5s 10s 30s 1m ... 2h"; a first retry waits level 3)`)
	return cmd
}

// devLayout is the dev cluster's port layout.
const devLayout = `
Ports (defaults --port 9876, --base-port 10900):
  name server       gRPC --port, gossip --port+1, HTTP --port+2 (with --http)
  replica r (1..9)  of group g (0 for broker-a, 1 for broker-b, ...):
                    base = --base-port + 100*g + 10*(r-1)
                    gRPC base+1, Raft base+2, gossip base+3, HTTP base+4 (with --http)
  e.g. broker-a replica 1: gRPC 10901, Raft 10902, gossip 10903, HTTP 10904
       broker-a replica 2: gRPC 10911 ...; broker-b replica 1: gRPC 11001 ...
HTTP serves /metrics (Prometheus) and /healthz.`

// waitForMasters waits until the name server knows n groups, each with a
// master.
func waitForMasters(ctx context.Context, ns string, n int, d time.Duration) error {
	a, err := newAdmin(ns)
	if err != nil {
		return err
	}
	defer a.close()
	deadline := time.Now().Add(d)
	for {
		info, err := a.clusterInfo(ctx)
		ready := 0
		if err == nil {
			for _, g := range info.Groups {
				if g.MasterId != 0 {
					ready++
				}
			}
		}
		if ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster has %d of %d groups with a master after %v", ready, n, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
