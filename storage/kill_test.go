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

const (
	childDirEnv     = "RAFTMQ_STORAGE_APPEND_CHILD_DIR"
	childRecycleEnv = "RAFTMQ_STORAGE_APPEND_CHILD_RECYCLE"
)

// runAppendChild appends batchFor(n), n = the store's last index + 1 and
// on, printing "acked N" after each, until it is killed. With
// childRecycleEnv set, retention retires every segment 20 ms after it was
// last written, so new segments are mostly spares.
func runAppendChild(dir string) {
	cfg := testConfig(dir)
	cfg.FlushInterval = 2 * time.Millisecond
	cfg.CheckpointInterval = 3 * time.Millisecond
	if os.Getenv(childRecycleEnv) != "" {
		cfg.RetentionAge = 20 * time.Millisecond
		cfg.RetentionInterval = 2 * time.Millisecond
	}
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
	killDuringAppends(t, nil, func(s *Store, last uint64) { checkHolds(t, s, last) })
}

// The same while retention retires segments as fast as they fill and new
// segments are spares, old records and all: none of those is ever taken
// for an acknowledged batch, none of those is lost.
func TestKill9WhileSegmentsAreRecycled(t *testing.T) {
	killDuringAppends(t, []string{childRecycleEnv + "=1"}, func(s *Store, last uint64) { checkFromMinimum(t, s, last) })
}

// checkFromMinimum verifies that queues 0..3 of topic T end with batch last
// and hold batchFor's messages from their minimum on.
func checkFromMinimum(t *testing.T, s *Store, last uint64) {
	t.Helper()
	want := wantByQueue(last)
	for q := int32(0); q < 4; q++ {
		min, max := s.QueueOffsets("T", q)
		if max != int64(len(want[q])) {
			t.Fatalf("queue %d ends at %d, want %d", q, max, len(want[q]))
		}
		for i, r := range readQueue(t, s, "T", q) {
			w := want[q][min+int64(i)]
			if r.QueueOffset != min+int64(i) || string(r.Body) != string(w.Body) || r.Keys[0] != w.Keys[0] {
				t.Fatalf("queue %d offset %d: got %s, want %s", q, min+int64(i), r.Keys, w.Keys)
			}
		}
	}
}

// killDuringAppends runs the append child (with env added) six times,
// killing it with SIGKILL after a random number of acknowledgements, and
// after each kill opens the store without retention and calls check with
// the last batch it holds, which must be at or past the last acknowledged.
func killDuringAppends(t *testing.T, env []string, check func(s *Store, last uint64)) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 8))
	var acked uint64
	for round := 0; round < 6; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), childDirEnv+"="+dir), env...)
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
		check(s, last)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killed after %d acks, store holds %d", round, acked, last)
		acked = last
	}
}
