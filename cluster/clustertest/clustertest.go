// Package clustertest holds what tests that run raftmq nodes on loopback
// share: free addresses, polling with a deadline, and building the raftmq
// binary for tests that run it as a process. Only tests import it.
package clustertest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// FreeAddrs reserves n loopback TCP addresses: it listens on each, notes
// it, and closes all. (Another process may take one in between; tests
// accept that rare race.)
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// WaitFor polls cond every 10 ms until it holds, failing the test when d
// passes first.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BuildRaftmq builds the raftmq binary from the package at dir (relative
// to the calling test's package) into a temporary directory, for a
// TestMain. It returns the binary's path and a function removing it.
func BuildRaftmq(dir string) (string, func(), error) {
	tmp, err := os.MkdirTemp("", "raftmq-bin")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(tmp, "raftmq")
	if out, err := exec.Command("go", "build", "-o", bin, dir).CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return "", nil, fmt.Errorf("build raftmq: %v\n%s", err, out)
	}
	return bin, func() { os.RemoveAll(tmp) }, nil
}
