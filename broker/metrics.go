package broker

import (
	"crypto/tls"
	"errors"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/message"
)

// metrics are a replica's Prometheus metrics, in a registry of its own (a
// process may run several replicas, as raftmq dev does).
type metrics struct {
	reg            *prometheus.Registry
	sendMessages   prometheus.Counter
	sendDuplicates prometheus.Counter // sends found stored already (dedup)
	sendSeconds    prometheus.Histogram
	pulls          *prometheus.CounterVec // by status
	pullSeconds    prometheus.Histogram
	// applySeconds: a send batch's Raft entry from Apply to applied on
	// the master, a quorum's fsync included (the commit latency).
	applySeconds  prometheus.Histogram
	applyMessages prometheus.Histogram // messages per Raft entry (group commit)
	// companyWaits: how long a send entry that could have gone waited for
	// company (batcher.go), by how the wait ended.
	companyWaits *prometheus.HistogramVec
	// Transactions: check-backs by result (sent to a producer, or none of
	// its group connected), and half messages ended by outcome.
	transactionChecks *prometheus.CounterVec
	transactionEnds   *prometheus.CounterVec
}

func newMetrics(b *Broker) *metrics {
	labels := prometheus.Labels{"group": b.cfg.Group, "replica": strconv.Itoa(int(b.self))}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		sendMessages: prometheus.NewCounter(prometheus.CounterOpts{Name: "raftmq_send_messages_total",
			Help: "Messages stored through SendMessage.", ConstLabels: labels}),
		sendDuplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "raftmq_send_duplicates_total",
			Help: "Messages sent again that were stored already (a producer's retry, within the dedup window), answered with the stored copy.", ConstLabels: labels}),
		sendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "raftmq_send_seconds",
			Help: "SendMessage latency, replication included.", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		pulls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "raftmq_pull_requests_total",
			Help: "PullMessage answers by status.", ConstLabels: labels}, []string{"status"}),
		pullSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "raftmq_pull_seconds",
			Help: "PullMessage latency, holding included.", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "raftmq_raft_commit_seconds",
			Help:        "A send batch's Raft entry from Apply to applied on the master: replication to a quorum, fsyncs included.",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		applyMessages: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "raftmq_raft_entry_messages",
			Help: "Messages per send Raft entry (group commit).", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		companyWaits: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "raftmq_group_commit_wait_seconds",
			Help: "How long a send entry that could have gone waited for the senders of the last entry to come back (--group-commit-wait), by how the wait ended: " +
				"company (as many sends came as it expected, or it filled) or timeout (the wait ran out). Long waits that end in timeout mean senders that do not come back at once, " +
				"such as producers at a steady rate, who pay the wait for nothing: --group-commit-wait off may serve them better.",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.00005, 2, 10)}, []string{"ended"}),
		transactionChecks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "raftmq_transaction_checks_total",
			Help: "Check-backs of open half messages made by this replica as master, by result: sent (to a producer of the half's group) or no_producer (none connected; counted all the same, as RocketMQ does).", ConstLabels: labels}, []string{"result"}),
		transactionEnds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "raftmq_transaction_ends_total",
			Help: "Half messages ended through this replica as master, by outcome: commit, rollback, check_max (rolled back after the last check-back), expired (deleted by retention while open).", ConstLabels: labels}, []string{"outcome"}),
	}
	gauge := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
	}
	stat := func(key string) func() float64 {
		return func() float64 {
			v, _ := strconv.ParseFloat(b.node.Raft.Stats()[key], 64)
			return v
		}
	}
	gauge("raftmq_held_pulls", "Pulls held for long polling.", func() float64 { return float64(b.holds.size()) })
	gauge("raftmq_master", "1 while this replica serves as its group's master.", func() float64 {
		if b.master.Load() {
			return 1
		}
		return 0
	})
	gauge("raftmq_store_failed", "1 once this replica's store has failed: it stopped serving and left its group's voting until restarted.", func() float64 {
		if b.fsm.failed() != nil {
			return 1
		}
		return 0
	})
	gauge("raftmq_raft_state", "Raft state: 0 follower, 1 candidate, 2 leader, 3 shutdown.", func() float64 {
		if b.node.Stopped() {
			return 3
		}
		switch b.node.Raft.State() {
		case raft.Candidate:
			return 1
		case raft.Leader:
			return 2
		case raft.Shutdown:
			return 3
		}
		return 0
	})
	gauge("raftmq_raft_term", "Raft term.", stat("term"))
	gauge("raftmq_raft_commit_index", "Raft commit index.", stat("commit_index"))
	gauge("raftmq_raft_applied_index", "Raft index applied to the store.", stat("applied_index"))
	gauge("raftmq_raft_last_contact_seconds", "Since a follower last heard from its leader (0 on the leader).", func() float64 {
		if b.node.Raft.State() == raft.Leader {
			return 0
		}
		return time.Since(b.node.Raft.LastContact()).Seconds()
	})
	gauge("raftmq_commitlog_min_offset", "First commitlog offset kept.", func() float64 { min, _ := b.store.CommitlogOffsets(); return float64(min) })
	gauge("raftmq_commitlog_max_offset", "Commitlog end offset.", func() float64 { _, max := b.store.CommitlogOffsets(); return float64(max) })
	gauge("raftmq_commitlog_bytes", "Commitlog bytes kept (end offset less first offset).", func() float64 { min, max := b.store.CommitlogOffsets(); return float64(max - min) })
	gauge("raftmq_transactions_open", "Half messages stored and neither committed nor rolled back yet.", func() float64 {
		_, end := b.store.QueueOffsets(message.TransHalfTopic, 0)
		return float64(b.meta.halves.open(end))
	})
	gauge("raftmq_producers", "Idempotent producers the group remembers the sequences of (MaxProducers caps it).", func() float64 {
		return float64(b.meta.producers.size())
	})
	m.reg.MustRegister(lagCollector{meta: b.meta, queues: b.store, labels: labels})
	m.reg.MustRegister(m.transactionChecks, m.transactionEnds)
	m.reg.MustRegister(m.sendMessages, m.sendDuplicates, m.sendSeconds, m.pulls, m.pullSeconds, m.applySeconds, m.applyMessages, m.companyWaits,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// lagCollector reports, at each scrape, how far every consumer group's
// committed offset is behind each queue's end: RocketMQ's "diff" in
// consumerProgress. Its series are as many as the offsets committed to the
// group, which topic and group deletion prune.
type lagCollector struct {
	meta   *metadata // the committed offsets
	queues queueEnds // where each queue ends
	labels prometheus.Labels
}

var lagLabels = []string{"consumer_group", "topic", "queue"}

func (c lagCollector) desc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, lagLabels, c.labels)
}

func (c lagCollector) lagDesc() *prometheus.Desc {
	return c.desc("raftmq_consumer_lag_messages", "Messages in a queue past its consumer group's committed offset.")
}

func (c lagCollector) offsetDesc() *prometheus.Desc {
	return c.desc("raftmq_consumer_offset", "A consumer group's committed offset in a queue.")
}

func (c lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lagDesc()
	ch <- c.offsetDesc()
}

func (c lagCollector) Collect(ch chan<- prometheus.Metric) {
	lag, offset := c.lagDesc(), c.offsetDesc()
	for k, off := range c.meta.committedOffsets() {
		_, end := c.queues.QueueOffsets(k.topic, k.queue)
		q := strconv.Itoa(int(k.queue))
		ch <- prometheus.MustNewConstMetric(lag, prometheus.GaugeValue, float64(max(end-off, 0)), k.group, k.topic, q)
		ch <- prometheus.MustNewConstMetric(offset, prometheus.GaugeValue, float64(off), k.group, k.topic, q)
	}
}

// healthy: the replica serves when its store has not failed, and its Raft
// member runs and knows a leader (its group can take writes).
func (b *Broker) healthy() error {
	if sf := b.fsm.failed(); sf != nil {
		return sf
	}
	if b.closed.Load() {
		return errors.New("shutting down")
	}
	if b.node.Stopped() || b.node.Raft.State() == raft.Shutdown {
		return errors.New("raft stopped")
	}
	if id, _ := b.leaderInfo(); id == 0 {
		return errors.New("no master known: an election is on")
	}
	return nil
}

func (b *Broker) startOps() error {
	if b.cfg.HTTPAddr == "" {
		return nil
	}
	var opsTLS *tls.Config
	if b.cfg.HTTPTLS {
		opsTLS = b.cfg.TLS.ServerConfig()
	}
	if b.cfg.RaftMetrics {
		labels := prometheus.Labels{"group": b.cfg.Group, "replica": strconv.Itoa(int(b.self))}
		stop, err := cluster.ExportRaftMetrics(prometheus.WrapRegistererWith(labels, b.metrics.reg))
		if err != nil {
			return err
		}
		b.stopRaftMetrics = stop
	}
	ops, err := cluster.ServeOps(b.cfg.HTTPAddr, b.metrics.reg, b.healthy, b.cfg.HTTPProfiling, opsTLS)
	if err != nil {
		if b.stopRaftMetrics != nil {
			b.stopRaftMetrics()
		}
		return err
	}
	b.ops = ops
	return nil
}
