package cluster

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

const killCommitlogChildEnv = "RAFTMQ_CLUSTER_COMMITLOG_CHILD"

// startKillMember starts the one-member group of
// TestKill9DuringCommitlogSegmentRotation on its commitlog in dir: 16 KiB
// segments, so that a few entries of a 1 KiB record each fill one.
func startKillMember(dir, addr string) (*storage.Store, *RaftNode, error) {
	return startOnCommitlog(dir, "1", map[string]string{"1": addr}, 16<<10, 1)
}

// killEntry is entry k: a head and one record of 1 KiB, "k<k>:" first.
func killEntry(k int) []byte {
	head := fmt.Sprintf("k%05d:", k)
	rec, err := message.Append(nil, &message.Message{Topic: "t", Body: []byte(head + strings.Repeat("x", 1024-len(head)))})
	if err != nil {
		panic(err)
	}
	return append([]byte{1, 'h'}, rec...)
}

// heldBodies reads queue t's records, in order.
func heldBodies(s *storage.Store) ([]string, error) {
	var out []string
	for off := int64(0); ; {
		r, err := s.GetMessages(storage.GetRequest{Topic: "t", Offset: off, MaxMessages: 64, MaxBytes: 1 << 20})
		if err != nil {
			return nil, err
		}
		if len(r.Records) == 0 {
			return out, nil
		}
		for _, rec := range r.Records {
			m, err := message.Decode(rec)
			if err != nil {
				return nil, err
			}
			out = append(out, string(m.Body[:7]))
		}
		off = r.NextOffset
	}
}

// runCommitlogApplyChild is the child of
// TestKill9DuringCommitlogSegmentRotation: the member in the directory and
// at the address the environment names applies killEntry(k) for k = what
// it holds on and on, printing "acked k" for each, until it is killed.
func runCommitlogApplyChild(spec string) {
	dir, addr, _ := strings.Cut(spec, ",")
	s, n, err := startKillMember(dir, addr)
	if err != nil {
		fmt.Println("start:", err)
		os.Exit(2)
	}
	leadAlone(n)
	held, err := heldBodies(s)
	if err != nil {
		fmt.Println("read:", err)
		os.Exit(2)
	}
	applyUntilKilled(n, len(held), killEntry)
}

// The third of issue 12's restart cases, on the commitlog: a real process
// applies entries to a one-member group whose Raft log is its commitlog,
// a segment filled every 14 entries or so, and is killed with SIGKILL at
// random moments. Every restart finds every acknowledged entry in its
// queue, in order, each once, and takes entries again.
func TestKill9DuringCommitlogSegmentRotation(t *testing.T) {
	dir := t.TempDir()
	addr := clustertest.FreeAddrs(t, 1)[0]
	rng := rand.New(rand.NewPCG(5, 6))
	acked := -1
	for round := 0; round < 6; round++ {
		acked = killApplyChild(t, killCommitlogChildEnv+"="+dir+","+addr, round, acked, acked+10+rng.IntN(60))

		s, n, err := startKillMember(dir, addr)
		if err != nil {
			t.Fatalf("round %d: restart after kill -9: %v", round, err)
		}
		stopDrain := drainLeaderChanges(n)
		clustertest.WaitFor(t, 5*time.Second, "leader", func() bool { return n.Raft.State() == raft.Leader })
		err = n.Raft.Barrier(5 * time.Second).Error()
		var held []string
		if err == nil {
			held, err = heldBodies(s)
		}
		if err == nil && len(held) <= acked {
			err = fmt.Errorf("%d entries held, entry %d was acknowledged", len(held), acked)
		}
		for k, b := range held {
			if err == nil && b != fmt.Sprintf("k%05d:", k) {
				err = fmt.Errorf("entry %d is %q", k, b)
			}
		}
		segs, _ := filepath.Glob(filepath.Join(dir, "store", "commitlog", "0*"))
		t.Logf("round %d: killed after ack %d, %d entries held, %d segments", round, acked, len(held), len(segs))
		cerr := n.Close()
		stopDrain()
		s.Close()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if cerr != nil {
			t.Fatal(cerr)
		}
		acked = len(held) - 1
	}
}
