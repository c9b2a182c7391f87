package main

import (
	"bufio"
	"encoding/json"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// `raftmq bench host` times round trips to a second process, synced
// appends in --dir and rounds of them started together, reports the floor
// as two round trips and a sync (and on one disk, two round trips and the
// later of two syncs together), and leaves nothing behind in --dir.
func TestBenchHostMeasuresTheFloor(t *testing.T) {
	dir := t.TempDir()
	out, err := exec.Command(binPath, "bench", "host", "--json", "--dir", dir,
		"--round-trips", "50", "--pause", "0", "--syncs", "20").Output()
	if err != nil {
		t.Fatalf("bench host: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var s hostFloor
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	for name, p := range map[string][2]float64{
		"round trip": {s.RoundTripP50, s.RoundTripP90},
		"sync":       {s.SyncP50, s.SyncP90},
		"sync3":      {s.Sync3P50, s.Sync3P90},
	} {
		if p[0] <= 0 || p[1] < p[0] {
			t.Errorf("%s: p50 %v ms, p90 %v ms; want a positive p50 at most the p90", name, p[0], p[1])
		}
	}
	if want := 2*s.RoundTripP50 + s.SyncP50; math.Abs(s.Floor-want) > 0.0015 {
		t.Errorf("floor %v ms, want 2 round trips and a sync, %v ms", s.Floor, want)
	}
	if s.Commit2P50 <= 0 || s.Commit3P50 <= 0 {
		t.Errorf("a commit's syncs: the later of 2 p50 %v ms, the second of 3 %v ms; want both positive", s.Commit2P50, s.Commit3P50)
	}
	if want := 2*s.RoundTripP50 + s.Commit2P50; math.Abs(s.FloorOneDisk-want) > 0.0015 {
		t.Errorf("floor on one disk %v ms, want 2 round trips and the later of 2 syncs, %v ms", s.FloorOneDisk, want)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("--dir holds %d files after the bench, want none", len(left))
	}
}

func TestBenchHostRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--syncs", "0"}, "--round-trips and --syncs must be positive"},
		{[]string{"--round-trips", "-1"}, "--round-trips and --syncs must be positive"},
		{[]string{"--pause", "-1ms"}, "--pause not negative"},
		{[]string{"--syncs", "100001"}, "--syncs at most 100000"},
		{[]string{"--round-trips", "10000001"}, "--round-trips at most 10000000"},
		{[]string{"--round-trips", "1", "--pause", "0", "--dir", "/nonexistent-raftmq-dir"}, "bench host: --dir: "},
	} {
		out, err := exec.Command(binPath, append([]string{"bench", "host"}, tc.args...)...).CombinedOutput()
		if _, exited := err.(*exec.ExitError); !exited || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: exit %v, output %q; want a non-zero exit saying %q", tc.args, err, out, tc.want)
		}
	}
}

// The echo process answers each send and ends when its stdin closes,
// whether or not anyone dialled it: a bench that dies leaves no echo
// process behind.
func TestEchoEndsWhenItsStdinCloses(t *testing.T) {
	for _, dial := range []bool{true, false} {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		done := make(chan error, 1)
		go func() { done <- runEcho(t.Context(), inR, outW) }()
		line, err := bufio.NewReader(outR).ReadString('\n')
		addr, ok := strings.CutPrefix(strings.TrimSpace(line), "echo ")
		if err != nil || !ok {
			t.Fatalf("echo said %q (%v), want its address", line, err)
		}
		if dial {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Write(make([]byte, hostSendBytes)); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(conn, make([]byte, hostAnswerBytes)); err != nil {
				t.Fatalf("no answer: %v", err)
			}
			defer conn.Close() // open still when stdin closes
		}
		inW.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("dialled %v: echo ended with %v", dial, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("dialled %v: echo still runs 10 s after its stdin closed", dial)
		}
	}
}
