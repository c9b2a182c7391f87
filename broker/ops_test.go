package broker

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
)

func get(url string) (int, string, error) {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// Every replica serves /healthz (200 once its group has a master) and
// Prometheus /metrics: sends, pulls, held pulls, Raft state, commitlog.
func TestMetricsAndHealth(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	g.createTopic("m", 1)
	m := g.master()
	for _, b := range g.brokers {
		waitFor(t, 5*time.Second, func() bool {
			code, _, err := get("http://" + b.OpsAddr() + "/healthz")
			return err == nil && code == http.StatusOK
		})
	}
	if _, err := g.client(m).SendMessage(context.Background(), oneMessage("m", 0, "counted")); err != nil {
		t.Fatal(err)
	}
	if _, err := g.client(m).PullMessage(context.Background(), &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "m"}); err != nil {
		t.Fatal(err)
	}
	_, body, err := get("http://" + g.brokers[m].OpsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`raftmq_send_messages_total{group="broker-a",replica="` + string(rune('1'+m)) + `"} 1`,
		`raftmq_pull_requests_total{group="broker-a",replica="` + string(rune('1'+m)) + `",status="PULL_FOUND"} 1`,
		`raftmq_master{group="broker-a",replica="` + string(rune('1'+m)) + `"} 1`,
		`raftmq_raft_state{group="broker-a",replica="` + string(rune('1'+m)) + `"} 2`,
		"raftmq_held_pulls", "raftmq_commitlog_max_offset", "raftmq_send_seconds_bucket", "raftmq_raft_applied_index",
		"raftmq_raft_commit_seconds_count{group=\"broker-a\",replica=\"" + string(rune('1'+m)) + "\"} 1", "raftmq_raft_entry_messages_bucket", "raftmq_commitlog_bytes",
		// No wait yet (one lone send), but both of its series are there.
		`raftmq_group_commit_wait_seconds_count{ended="company",group="broker-a",replica="` + string(rune('1'+m)) + `"} 0`,
		`raftmq_group_commit_wait_seconds_count{ended="timeout",group="broker-a",replica="` + string(rune('1'+m)) + `"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("metrics lack %q:\n%s", want, body)
		}
	}
	// Consumer lag: 3 messages, offset 1 committed, so 2 behind.
	for i := 0; i < 2; i++ {
		if _, err := g.client(m).SendMessage(context.Background(), oneMessage("m", 0, "more")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.client(m).UpdateConsumerOffset(context.Background(), &pb.UpdateConsumerOffsetRequest{ConsumerGroup: "cg",
		Offsets: []*pb.QueueOffset{{Topic: "m", QueueId: 0, Offset: 1}}}); err != nil {
		t.Fatal(err)
	}
	for _, b := range g.brokers { // every replica: the offsets are replicated
		replica := `replica="` + string(rune('1'+slices.Index(g.brokers, b))) + `"`
		waitFor(t, 5*time.Second, func() bool {
			_, body, err := get("http://" + b.OpsAddr() + "/metrics")
			return err == nil &&
				strings.Contains(body, `raftmq_consumer_lag_messages{consumer_group="cg",group="broker-a",queue="0",`+replica+`,topic="m"} 2`) &&
				strings.Contains(body, `raftmq_consumer_offset{consumer_group="cg",group="broker-a",queue="0",`+replica+`,topic="m"} 1`)
		})
	}
	addr := g.brokers[m].OpsAddr()
	g.stop(m)
	if _, _, err := get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("a stopped replica still answers /healthz")
	}
}

// Go's profiles are served only when asked for.
func TestProfilesOnlyWhenAskedFor(t *testing.T) {
	g := newGroup(t, 2, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.HTTPProfiling = c.ReplicaID == 1
	})
	for i, want := range []int{http.StatusOK, http.StatusNotFound} {
		code, body, err := get("http://" + g.brokers[i].OpsAddr() + "/debug/pprof/goroutine?debug=1")
		if err != nil || code != want {
			t.Fatalf("replica %d: /debug/pprof/goroutine: %d %v, want %d", i+1, code, err, want)
		}
		if want == http.StatusOK && !strings.Contains(body, "goroutine profile") {
			t.Fatalf("replica %d: not a goroutine profile: %.80q", i+1, body)
		}
	}
}

// A replica whose HTTP address is taken does not start, and says why.
func TestStartFailsOnBusyHTTPAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	grpcAddrs, raftAddrs := clustertest.FreeAddrs(t, 1), clustertest.FreeAddrs(t, 1)
	cfg := testConfig(dir, 1, grpcAddrs, raftAddrs)
	cfg.HTTPAddr = busy.Addr().String()
	if b, err := Start(cfg); err == nil {
		b.Close()
		t.Fatal("started with its HTTP address taken")
	}
}
