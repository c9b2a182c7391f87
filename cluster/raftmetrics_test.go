package cluster

import (
	"strings"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
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
			if s := f.GetMetric()[0].GetSummary(); s.GetSampleCount() != 1 || s.GetSampleSum() < 3 {
				t.Fatalf("raft_commitTime: %d samples summing %v ms, want 1 of at least 3 ms", s.GetSampleCount(), s.GetSampleSum())
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
