// Package clustertest holds what tests that run raftmq nodes on loopback
// share: free addresses (claimed across test processes), polling with a
// deadline, and building the raftmq binary for tests that run it as a
// process (clustertest.go); every method of the contract's services called
// by name, signed with a test access key or not, for access-control tests
// (signed.go); records as a producer encodes them (records.go). Only tests
// import it.
package clustertest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Ports are handed out from 10000-19999: below Linux's ephemeral range
// (32768-60999), from which the kernel picks the local ports of outgoing
// connections, and below the ranges cmd/raftmq's tests reserve (20000 and
// up). A port taken with ":0" and closed could be reused by any test's
// next dial before the node under test binds it. Each test process starts
// at a random point, so packages testing in parallel rarely meet, and a
// port is checked free (TCP and UDP, as memberlist binds both) before it
// is given.
//
// Rarely is not never: two packages' test processes that reached the same
// port at the same moment both found it free, and the second to bind it
// failed (CI on 2026-12-05: client's TestDialerGetsAdvertisedAddresses,
// "bind: address already in use" on a gossip port). So a port is also
// claimed across processes before it is given: an exclusive flock on a
// file named for it in os.TempDir()/raftmq-test-ports-UID, held until the
// process exits, when the kernel lets it go however the process ended.
// A process reuses its own claims when its walk comes round again, as
// before.
const (
	portLow   = 10000
	portCount = 10000
)

var nextPort atomic.Int32

func init() { nextPort.Store(int32(rand.IntN(portCount))) }

// claims are the ports this process holds against other processes, each
// by its locked file (opened close-on-exec: the nodes a test starts as
// processes do not inherit them).
var claims = struct {
	sync.Mutex
	held map[int]*os.File
}{held: map[int]*os.File{}}

// claimsDir holds the claims' files: one a user, whose files another
// user could not open (a claim then between two users' tests is not made).
func claimsDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("raftmq-test-ports-%d", os.Getuid()))
}

// claim takes port for this process unless another holds it.
func claim(port int) (bool, error) {
	claims.Lock()
	defer claims.Unlock()
	if _, ok := claims.held[port]; ok {
		return true, nil
	}
	f, err := lockPortFile(port)
	if f != nil {
		claims.held[port] = f
	}
	return f != nil, err
}

// lockPortFile opens port's file in claimsDir and locks it: nil, and no
// error, when another open file of it (another process's) holds the lock.
func lockPortFile(port int) (*os.File, error) {
	dir := claimsDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, err
	}
	return f, nil
}

// FreeAddrs returns n loopback addresses whose ports were free for TCP and
// UDP a moment ago, that no other call in this process returned, and that
// no other process using this package has been given.
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > portCount {
			t.Fatal("clustertest: no free loopback port")
		}
		port := portLow + int(nextPort.Add(1))%portCount
		if ok, err := claim(port); err != nil {
			t.Fatalf("clustertest: claim port %d: %v", port, err)
		} else if !ok {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		out = append(out, addr)
	}
	return out
}

// WaitFor polls cond every 10 ms until it holds, failing the test when d
// passes first.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	WaitForState(t, d, what, func() (bool, string) { return cond(), "" })
}

// WaitForState is WaitFor for a cond that also says what it saw: a failure
// names what the last poll saw, where a bare timeout says nothing of why.
func WaitForState(t testing.TB, d time.Duration, what string, cond func() (ok bool, seen string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if seen != "" {
				t.Fatalf("%s: not within %v; last seen: %s", what, d, seen)
			}
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RunWithRaftmq is a TestMain's body for tests that run the raftmq binary:
// it builds the binary from the package at dir (relative to the calling
// test's package) into a temporary directory, sets *bin to its path, runs
// the tests, then after (when they passed and it is set: a leak check, say),
// and removes the binary. It returns the exit code.
func RunWithRaftmq(m *testing.M, dir string, bin *string, after func() error) int {
	tmp, err := os.MkdirTemp("", "raftmq-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	*bin = filepath.Join(tmp, "raftmq")
	if out, err := exec.Command("go", "build", "-o", *bin, dir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build raftmq: %v\n%s", err, out)
		return 1
	}
	code := m.Run()
	if code == 0 && after != nil {
		if err := after(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}
