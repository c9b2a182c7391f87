package storage

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const childDirEnv = "RAFTMQ_STORAGE_APPEND_CHILD_DIR"

// runAppendChild appends batchFor(n), n = the store's last index + 1 and
// on, printing "acked N" after each, until it is killed.
func runAppendChild(dir string) {
	cfg := testConfig(dir)
	cfg.FlushInterval = 2 * time.Millisecond
	cfg.CheckpointInterval = 3 * time.Millisecond
	s, err := Open(cfg)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	for idx := s.LastRaftIndex() + 1; ; idx++ {
		if _, err := s.Append(idx, batchFor(idx)); err != nil {
			fmt.Println("append:", err)
			os.Exit(2)
		}
		fmt.Printf("acked %d\n", idx)
	}
}

// A real process appending is killed with SIGKILL at random moments; after
// each kill the store holds every batch it acknowledged, complete, with no
// gap and no duplicate, and the next process appends on from there.
func TestKill9DuringAppends(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 8))
	var acked uint64
	for round := 0; round < 6; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childDirEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		want := acked + 20 + uint64(rng.IntN(300))
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			n, err := strconv.ParseUint(strings.TrimPrefix(line, "acked "), 10, 64)
			if err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child said %q", line)
			}
			if n != acked+1 {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child acked %d after %d", n, acked)
			}
			acked = n
			if acked >= want {
				break
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		// Acks printed before the kill landed count too.
		for sc.Scan() {
			if n, err := strconv.ParseUint(strings.TrimPrefix(sc.Text(), "acked "), 10, 64); err == nil {
				acked = n
			}
		}
		cmd.Wait()

		s := openStore(t, testConfig(dir))
		last := s.LastRaftIndex()
		if last < acked {
			s.Close()
			t.Fatalf("round %d: store holds up to %d, %d was acknowledged", round, last, acked)
		}
		checkHolds(t, s, last)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killed after %d acks, store holds %d", round, acked, last)
		acked = last
	}
}
