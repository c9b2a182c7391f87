package cluster

import (
	"fmt"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gometricsprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// hashicorp/raft and memberlist time their own steps through go-metrics,
// whose sink is one per process (by default a black hole). Those timings
// say where a commit's time goes, which our own metrics cannot: a
// follower's log write (raft_rpc_appendEntries_storeLogs), each
// follower's AppendEntries round trip as the leader sees it
// (raft_replication_appendEntries_rpc, peer_id), the leader's dispatch to
// commit (raft_commitTime), the state machine's apply (raft_fsm_apply).
// Reading them off a hand-built sink showed a follower's write at 0.85 ms
// inside a 1.34-1.53 ms round trip under 16 sync senders, the rest
// transport and wake-ups (broker/README.md, 2026-12-05, second sitting).
// Operators of Consul and Nomad read the same series.
//
// ExportRaftMetrics makes reg the process's sink: timers become summaries
// in milliseconds, counters and gauges keep their kind, series a minute
// stale are dropped. It is for a process that runs one replica (`raftmq
// broker`): the sink is process-wide, so the replicas of `raftmq dev` would
// share unlabelled series. The returned stop puts the black hole back.
func ExportRaftMetrics(reg prometheus.Registerer) (stop func(), err error) {
	sinkMu.Lock()
	defer sinkMu.Unlock()
	if sinkSet {
		return nil, fmt.Errorf("cluster: raft metrics exported already in this process")
	}
	sink, err := gometricsprom.NewPrometheusSinkFrom(gometricsprom.PrometheusOpts{
		Registerer: reg,
		Expiration: time.Minute,
		Name:       "raftmq_raft_metrics_sink",
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: raft metrics: %w", err)
	}
	if _, err := gometrics.NewGlobal(sinkConfig(), sink); err != nil {
		reg.Unregister(sink)
		return nil, fmt.Errorf("cluster: raft metrics: %w", err)
	}
	sinkSet = true
	return func() {
		sinkMu.Lock()
		defer sinkMu.Unlock()
		_, _ = gometrics.NewGlobal(sinkConfig(), &gometrics.BlackholeSink{})
		reg.Unregister(sink)
		sinkSet = false
	}, nil
}

var (
	sinkMu  sync.Mutex
	sinkSet bool
)

// sinkConfig names series as the libraries do (raft.commitTime is
// raft_commitTime), without the host name in gauges' names, and without
// go-metrics' own runtime sampler (a goroutine a second; Prometheus' Go
// collector already reports the runtime).
func sinkConfig() *gometrics.Config {
	c := gometrics.DefaultConfig("")
	c.EnableHostname = false
	c.EnableRuntimeMetrics = false
	return c
}
