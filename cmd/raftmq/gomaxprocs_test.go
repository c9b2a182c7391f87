package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

func TestReplicasOnThisHost(t *testing.T) {
	for _, tc := range []struct {
		own   string
		peers []string
		want  int
	}{
		{"127.0.0.1:10921", []string{"127.0.0.1:10921", "localhost:10922", "[::1]:10923"}, 3},
		{"localhost:10921", []string{"127.0.0.2:10921", "127.0.0.3:10921"}, 2},
		{"10.0.0.5:10921", []string{"10.0.0.5:10921", "10.0.0.5:10922", "10.0.0.6:10921"}, 2},
		{"broker-a-1:10921", []string{"broker-a-1:10921", "broker-a-2:10921", "broker-a-3:10921"}, 1},
		{"127.0.0.1:10921", []string{"127.0.0.1:10921", "10.0.0.6:10921", "10.0.0.7:10921"}, 1},
		{"Host-A:1", []string{"host-a:1", "host-a:2"}, 2},
		{"no port", []string{"no port", "neither"}, 1},
	} {
		peers := map[string]string{}
		for i, p := range tc.peers {
			peers[strconv.Itoa(i+1)] = p
		}
		if got := replicasOnThisHost(tc.own, peers); got != tc.want {
			t.Errorf("replicasOnThisHost(%q, %q) = %d, want %d", tc.own, tc.peers, got, tc.want)
		}
	}
}

// --gomaxprocs auto shares Go's default among the replicas on this host,
// all keeps it, a number sets it, and the GOMAXPROCS variable wins.
func TestGOMAXPROCS(t *testing.T) {
	goDefault := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(goDefault)
	peers := map[string]string{"1": "127.0.0.1:1", "2": "127.0.0.1:2", "3": "127.0.0.1:3"}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Setenv("GOMAXPROCS", "")
	for _, tc := range []struct {
		mode string
		want int
	}{
		{"auto", max(1, goDefault/3)},
		{"all", goDefault},
		{"5", 5},
	} {
		runtime.GOMAXPROCS(goDefault)
		if err := setGOMAXPROCS(tc.mode, "127.0.0.1:1", peers, log); err != nil {
			t.Fatal(err)
		}
		if got := runtime.GOMAXPROCS(0); got != tc.want {
			t.Errorf("--gomaxprocs %s: GOMAXPROCS %d, want %d (Go's default %d, 3 replicas on loopback)", tc.mode, got, tc.want, goDefault)
		}
	}
	runtime.GOMAXPROCS(goDefault)
	t.Setenv("GOMAXPROCS", strconv.Itoa(goDefault))
	if err := setGOMAXPROCS("1", "127.0.0.1:1", peers, log); err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != goDefault {
		t.Errorf("--gomaxprocs 1 with GOMAXPROCS=%d: %d; the variable must win", goDefault, got)
	}
	for _, bad := range []string{"0", "many", "-2"} {
		if err := setGOMAXPROCS(bad, "127.0.0.1:1", peers, log); err == nil || !strings.Contains(err.Error(), "want auto, all or a number of threads") {
			t.Errorf("--gomaxprocs %s: %v", bad, err)
		}
	}
}

// A broker process, one of three replicas listed on loopback, runs with
// a third of the CPUs Go would give it (its /metrics says so), as many as
// Go gives it with --gomaxprocs all.
func TestABrokerProcessSharesTheHostsCPUs(t *testing.T) {
	bin := buildBinary(t)
	raftAddrs := clustertest.FreeAddrs(t, 3)
	var peers []string
	for i, a := range raftAddrs {
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, a))
	}
	threads := func(flags ...string) int {
		addrs := clustertest.FreeAddrs(t, 2)
		cmd := exec.Command(bin, append([]string{"broker", "--group", "g", "--id", "1", "--dir", filepath.Join(t.TempDir(), "b"),
			"--grpc", addrs[0], "--http", addrs[1], "--raft", raftAddrs[0], "--peers", strings.Join(peers, ","), "--log-level", "warn"}, flags...)...)
		cmd.Env = withoutVar(os.Environ(), "GOMAXPROCS")
		startServer(t, cmd, "broker g replica 1")
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		m := waitForMetric(t, addrs[1], `(?m)^go_sched_gomaxprocs_threads (\d+)$`, "go_sched_gomaxprocs_threads on the broker's /metrics")
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	all := threads("--gomaxprocs", "all")
	if got, want := threads(), max(1, all/3); got != want {
		t.Fatalf("GOMAXPROCS %d by default, want %d: a third of Go's %d", got, want, all)
	}
}
