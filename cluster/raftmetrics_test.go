package cluster

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gometricsprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// What hashicorp/raft times reaches the registry, named as raft names it
// and labelled as the registerer says; one export a process; after stop,
// nothing more arrives, and the process may export again.
func TestExportRaftMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	stop, err := ExportRaftMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"replica": "1"}, reg))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ExportRaftMetrics(prometheus.NewRegistry()); err == nil || !strings.Contains(err.Error(), "exported already") {
		t.Fatalf("a second export: %v, want refused", err)
	}
	gometrics.MeasureSince([]string{"raft", "commitTime"}, time.Now().Add(-3*time.Millisecond))
	gometrics.IncrCounter([]string{"raft", "apply"}, 2)
	want := `
# HELP raft_apply raft_apply
# TYPE raft_apply counter
raft_apply{replica="1"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "raft_apply"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "raft_commitTime"); err != nil || n != 1 {
		t.Fatalf("raft_commitTime: %d series (%v), want 1", n, err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "raft_commitTime" {
			if h := f.GetMetric()[0].GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() < 3 {
				t.Fatalf("raft_commitTime: %d samples summing %v ms, want 1 of at least 3 ms", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}

	stop()
	gometrics.IncrCounter([]string{"raft", "apply"}, 5)
	if n, _ := testutil.GatherAndCount(reg, "raft_apply"); n != 0 {
		t.Fatalf("raft_apply: %d series after stop, want none (the sink unregistered)", n)
	}
	again := prometheus.NewRegistry()
	stop2, err := ExportRaftMetrics(again)
	if err != nil {
		t.Fatalf("export after stop: %v", err)
	}
	defer stop2()
	gometrics.IncrCounter([]string{"raft", "apply"}, 1)
	if n, _ := testutil.GatherAndCount(again, "raft_apply"); n != 1 {
		t.Fatalf("raft_apply: %d series in the new registry, want 1", n)
	}
}

// Each kind keeps its value as Prometheus reads it: a gauge its last, a
// counter its total, a timer its samples in cumulative buckets of
// milliseconds; labels make series of their own; names are go-metrics'.
func TestRaftSinkSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newRaftSink(time.Minute)
	reg.MustRegister(s)
	s.SetGauge([]string{"raft", "peers"}, 3)
	s.SetGauge([]string{"raft", "peers"}, 2)
	s.IncrCounter([]string{"memberlist", "msg.alive"}, 1)
	s.IncrCounter([]string{"memberlist", "msg.alive"}, 2.5)
	peer2 := []gometrics.Label{{Name: "peer_id", Value: "2"}}
	for _, ms := range []float32{0.015625, 0.375, 0.375, 7, 20000} { // exact in float32
		s.AddSampleWithLabels([]string{"raft", "replication", "appendEntries", "rpc"}, ms, peer2)
	}
	s.AddSampleWithLabels([]string{"raft", "replication", "appendEntries", "rpc"}, 1, []gometrics.Label{{Name: "peer_id", Value: "3"}})
	s.AddSample([]string{"9lives", "a-b c/d=e"}, 1)
	s.EmitKey([]string{"raft", "emitted"}, 1)

	want := `
# HELP raft_peers raft_peers
# TYPE raft_peers gauge
raft_peers 2
# HELP memberlist_msg_alive memberlist_msg_alive
# TYPE memberlist_msg_alive counter
memberlist_msg_alive 3.5
# HELP raft_replication_appendEntries_rpc raft_replication_appendEntries_rpc
# TYPE raft_replication_appendEntries_rpc histogram
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="0.025"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="0.05"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="0.1"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="0.25"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="0.5"} 3
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="1"} 3
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="2.5"} 3
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="5"} 3
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="10"} 4
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="25"} 4
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="50"} 4
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="100"} 4
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="250"} 4
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="500"} 4
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="1000"} 4
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="2500"} 4
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="5000"} 4
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="10000"} 4
raft_replication_appendEntries_rpc_bucket{peer_id="2",le="+Inf"} 5
raft_replication_appendEntries_rpc_sum{peer_id="2"} 20007.765625
raft_replication_appendEntries_rpc_count{peer_id="2"} 5
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="0.025"} 0
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="0.05"} 0
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="0.1"} 0
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="0.25"} 0
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="0.5"} 0
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="1"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="2.5"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="5"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="10"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="25"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="50"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="100"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="250"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="500"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="1000"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="2500"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="5000"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="10000"} 1
raft_replication_appendEntries_rpc_bucket{peer_id="3",le="+Inf"} 1
raft_replication_appendEntries_rpc_sum{peer_id="3"} 1
raft_replication_appendEntries_rpc_count{peer_id="3"} 1
`
	names := []string{"raft_peers", "memberlist_msg_alive", "raft_replication_appendEntries_rpc"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "_9lives_a_b_c_d_e"); err != nil || n != 1 {
		t.Fatalf("a key with a leading digit and forbidden bytes: %d series (%v), want 1 named _9lives_a_b_c_d_e", n, err)
	}
	if n, _ := testutil.GatherAndCount(reg, "raft_emitted"); n != 0 {
		t.Fatalf("an emitted key: %d series, want none", n)
	}
}

// A series that does not change for the expiry is no longer reported; one
// that does is kept, and comes back once emitted again.
func TestRaftSinkExpiry(t *testing.T) {
	s := newRaftSink(time.Minute)
	s.IncrCounter([]string{"raft", "stale"}, 1)
	s.IncrCounter([]string{"raft", "busy"}, 1)
	t0 := time.Now()
	if n := len(s.live(t0)); n != 2 {
		t.Fatalf("%d series at first, want 2", n)
	}
	s.IncrCounter([]string{"raft", "busy"}, 1)
	got := s.live(t0.Add(2 * time.Minute))
	if len(got) != 1 || got[0].key[1] != "busy" {
		t.Fatalf("after a minute: %d series (%v), want only raft.busy", len(got), got)
	}
	s.IncrCounter([]string{"raft", "stale"}, 1)
	if n := len(s.live(t0.Add(3 * time.Minute))); n != 2 {
		t.Fatalf("%d series once raft.stale is emitted again, want 2", n)
	}
}

// Emissions from many goroutines while the registry gathers lose no
// sample (run under -race).
func TestRaftSinkConcurrentEmissions(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newRaftSink(time.Minute)
	reg.MustRegister(s)
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			labels := []gometrics.Label{{Name: "peer_id", Value: strconv.Itoa(g % 2)}}
			for range each {
				s.AddSampleWithLabels([]string{"raft", "commitTime"}, 1, labels)
				s.IncrCounter([]string{"raft", "apply"}, 1)
			}
		}()
	}
	for range 5 {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var samples uint64
	var sum, applied float64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "raft_commitTime":
				samples += m.GetHistogram().GetSampleCount()
				sum += m.GetHistogram().GetSampleSum()
			case "raft_apply":
				applied += m.GetCounter().GetValue()
			}
		}
	}
	if samples != goroutines*each || sum != goroutines*each || applied != goroutines*each {
		t.Fatalf("%d samples summing %v, %v applied; want %d of each", samples, sum, applied, goroutines*each)
	}
}

// What an emission costs the process: this sink against go-metrics' own
// Prometheus sink, the one ExportRaftMetrics used before.
func BenchmarkRaftSinkSample(b *testing.B) {
	key := []string{"raft", "replication", "appendEntries", "rpc"}
	labels := []gometrics.Label{{Name: "peer_id", Value: "2"}}
	b.Run("sink=raftSink", func(b *testing.B) {
		s := newRaftSink(time.Minute)
		b.ReportAllocs()
		for b.Loop() {
			s.AddSampleWithLabels(key, 0.8, labels)
		}
	})
	b.Run("sink=go-metrics-prometheus", func(b *testing.B) {
		s, err := gometricsprom.NewPrometheusSinkFrom(gometricsprom.PrometheusOpts{
			Registerer: prometheus.NewRegistry(), Expiration: time.Minute, Name: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			s.AddSampleWithLabels(key, 0.8, labels)
		}
	})
}
