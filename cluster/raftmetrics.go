package cluster

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
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
// ExportRaftMetrics makes reg the process's sink (raftSink): timers become
// histograms in milliseconds, counters and gauges keep their kind, series
// that did not change for a minute are dropped. It is for a process that
// runs one replica (`raftmq broker`): the sink is process-wide, so the
// replicas of `raftmq dev` would share unlabelled series. The returned
// stop puts the black hole back.
func ExportRaftMetrics(reg prometheus.Registerer) (stop func(), err error) {
	sinkMu.Lock()
	defer sinkMu.Unlock()
	if sinkSet {
		return nil, fmt.Errorf("cluster: raft metrics exported already in this process")
	}
	sink := newRaftSink(time.Minute)
	if err := reg.Register(sink); err != nil {
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

// raftSink is a go-metrics sink that a Prometheus registry gathers. It
// replaces go-metrics' own Prometheus sink, which joined and rewrote the
// key into two new strings, looked the series up in a sync.Map, stored a
// fresh copy of it back and fed a summary (a locked quantile stream) on
// every emission, some 650-800 ns and 5 allocations (BenchmarkRaftSinkSample)
// and, under 16 sync senders, 12% of a follower's CPU in pprof (about 2.6
// µs a message), on the commit's critical path. Here an emission hashes
// the key where it lies, finds its series under a read lock and counts
// with atomic adds: 80-110 ns, no allocation once the series exists, and
// 2-4% of that follower's CPU with go-metrics' own wrapper (broker/README.md,
// 2026-12-05, third sitting).
type raftSink struct {
	expiry time.Duration
	// sentinel is the one descriptor the sink describes, which makes it a
	// collector the registry can unregister; the series' own descriptors
	// are made as they appear.
	sentinel *prometheus.Desc

	mu     sync.RWMutex
	series map[uint64][]*sinkSeries // by seriesHash; a slice for collisions
}

// sinkKind is what a series counts.
type sinkKind byte

const (
	kindGauge sinkKind = iota
	kindCounter
	kindSample
)

// sampleBucketsMs are the upper bounds of a timer's histogram buckets, in
// milliseconds: raft's steps take from tens of microseconds (an apply) to
// seconds (a snapshot).
var sampleBucketsMs = []float64{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

// sinkSeries is one series: a name, its labels and its value.
type sinkSeries struct {
	kind   sinkKind
	key    []string // as emitted, to tell hash collisions apart
	labels []gometrics.Label
	desc   *prometheus.Desc

	// value is a gauge's or a counter's value, or a timer's sum, as
	// math.Float64bits.
	value atomic.Uint64
	// buckets count a timer's samples at or below each bound of
	// sampleBucketsMs, one more for those above the last.
	buckets []atomic.Uint64
	// updates counts emissions; Collect drops a series whose count did
	// not move for expiry (seen, changed: guarded by raftSink.mu).
	updates atomic.Uint64
	seen    uint64
	changed time.Time
}

func newRaftSink(expiry time.Duration) *raftSink {
	return &raftSink{
		expiry:   expiry,
		sentinel: prometheus.NewDesc("raftmq_raft_metrics_sink", "go-metrics series of hashicorp/raft and memberlist", nil, nil),
		series:   make(map[uint64][]*sinkSeries),
	}
}

// seriesHash is FNV-1a over the kind, the key's parts and the labels,
// each part ended by a byte no name holds.
func seriesHash(kind sinkKind, key []string, labels []gometrics.Label) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	add := func(s string, end byte) {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * prime
		}
		h = (h ^ uint64(end)) * prime
	}
	h = (h ^ uint64(kind)) * prime
	for _, p := range key {
		add(p, 0)
	}
	for _, l := range labels {
		add(l.Name, 1)
		add(l.Value, 2)
	}
	return h
}

// find returns the series of kind, key and labels, made on first use.
func (s *raftSink) find(kind sinkKind, key []string, labels []gometrics.Label) *sinkSeries {
	h := seriesHash(kind, key, labels)
	s.mu.RLock()
	for _, se := range s.series[h] {
		if se.is(kind, key, labels) {
			s.mu.RUnlock()
			return se
		}
	}
	s.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, se := range s.series[h] {
		if se.is(kind, key, labels) {
			return se
		}
	}
	se := newSinkSeries(kind, key, labels)
	s.series[h] = append(s.series[h], se)
	return se
}

func newSinkSeries(kind sinkKind, key []string, labels []gometrics.Label) *sinkSeries {
	se := &sinkSeries{kind: kind, key: slices.Clone(key), labels: slices.Clone(labels), changed: time.Now()}
	constLabels := make(prometheus.Labels, len(labels))
	for _, l := range labels {
		constLabels[promName(l.Name, false)] = l.Value
	}
	name := promName(strings.Join(key, "_"), true)
	se.desc = prometheus.NewDesc(name, name, nil, constLabels)
	if kind == kindSample {
		se.buckets = make([]atomic.Uint64, len(sampleBucketsMs)+1)
	}
	return se
}

func (se *sinkSeries) is(kind sinkKind, key []string, labels []gometrics.Label) bool {
	return se.kind == kind && slices.Equal(se.key, key) && slices.Equal(se.labels, labels)
}

// promName makes s a valid Prometheus metric name (colon true) or label
// name: every byte but a letter, a digit, '_' (or ':' in a metric name)
// becomes '_', as go-metrics' own sink rewrote ' ', '.', '=', '-' and '/',
// so the names are the ones it gave; a leading digit gets a '_' before it.
func promName(s string, colon bool) string {
	b := []byte(s)
	for i, c := range b {
		if !(c == '_' || (colon && c == ':') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
			b[i] = '_'
		}
	}
	if len(b) == 0 || (b[0] >= '0' && b[0] <= '9') {
		return "_" + string(b)
	}
	return string(b)
}

func (se *sinkSeries) add(v float64) {
	for {
		old := se.value.Load()
		if se.value.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func (s *raftSink) SetGauge(key []string, val float32) { s.SetGaugeWithLabels(key, val, nil) }

func (s *raftSink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	se := s.find(kindGauge, key, labels)
	se.value.Store(math.Float64bits(float64(val)))
	se.updates.Add(1)
}

// EmitKey keeps nothing: Prometheus has no kind for a stream of values.
func (s *raftSink) EmitKey(key []string, val float32) {}

func (s *raftSink) IncrCounter(key []string, val float32) { s.IncrCounterWithLabels(key, val, nil) }

func (s *raftSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	se := s.find(kindCounter, key, labels)
	se.add(float64(val))
	se.updates.Add(1)
}

func (s *raftSink) AddSample(key []string, val float32) { s.AddSampleWithLabels(key, val, nil) }

// AddSampleWithLabels counts a timing in milliseconds (go-metrics'
// default TimerGranularity).
func (s *raftSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	se := s.find(kindSample, key, labels)
	v := float64(val)
	i, _ := slices.BinarySearch(sampleBucketsMs, v)
	se.buckets[i].Add(1)
	se.add(v)
	se.updates.Add(1)
}

// Describe gives the sentinel only: the series are not known beforehand,
// and a registry that is not pedantic gathers what a collector that
// described something collects.
func (s *raftSink) Describe(ch chan<- *prometheus.Desc) { ch <- s.sentinel }

// Collect gives every series and drops those that did not change for
// the expiry: a peer removed from the group stops being reported. It
// holds the lock only to list them, not while the registry reads them.
func (s *raftSink) Collect(ch chan<- prometheus.Metric) {
	for _, se := range s.live(time.Now()) {
		ch <- se.metric()
	}
}

// live lists the series that changed within the expiry, and forgets the
// others.
func (s *raftSink) live(now time.Time) []*sinkSeries {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*sinkSeries
	for h, list := range s.series {
		kept := list[:0]
		for _, se := range list {
			if n := se.updates.Load(); n != se.seen {
				se.seen, se.changed = n, now
			} else if s.expiry > 0 && now.Sub(se.changed) > s.expiry {
				continue
			}
			kept = append(kept, se)
		}
		if len(kept) == 0 {
			delete(s.series, h)
			continue
		}
		clear(list[len(kept):])
		s.series[h] = kept
		all = append(all, kept...)
	}
	return all
}

func (se *sinkSeries) metric() prometheus.Metric {
	v := math.Float64frombits(se.value.Load())
	var m prometheus.Metric
	var err error
	switch se.kind {
	case kindGauge:
		m, err = prometheus.NewConstMetric(se.desc, prometheus.GaugeValue, v)
	case kindCounter:
		m, err = prometheus.NewConstMetric(se.desc, prometheus.CounterValue, v)
	default:
		// The count is the buckets' total, read bucket by bucket, so that
		// no bucket exceeds it; a sample arriving meanwhile may be in the
		// sum and not yet in the count, or the reverse, until the next
		// scrape.
		cumulative := make(map[float64]uint64, len(sampleBucketsMs))
		var count uint64
		for i := range se.buckets {
			count += se.buckets[i].Load()
			if i < len(sampleBucketsMs) {
				cumulative[sampleBucketsMs[i]] = count
			}
		}
		m, err = prometheus.NewConstHistogram(se.desc, count, v, cumulative)
	}
	if err != nil { // a label value that is not UTF-8: the gather reports it
		return prometheus.NewInvalidMetric(se.desc, err)
	}
	return m
}
