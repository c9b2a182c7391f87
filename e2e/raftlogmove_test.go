package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/e2e/lazyfs"
)

// An operator moves a WAL group's Raft log into the commitlog with the
// CLI, on broker processes: the move begins and the group refuses sends
// with WRITES_PAUSED; an abort resumes them; begun again, each replica is
// restarted with --raft-log commitlog and moves its WAL as it starts, the
// command listing those still on their WAL; once none is, it ends the
// move, sends resume, and the replicas' commitlogs are identical
// (raftmq cluster check).
func TestMoveRaftLogThroughTheCLI(t *testing.T) {
	c := procClusterAddrs(t)
	c.brokerFlags = []string{"--raft-log", "wal"}
	c.run()
	c.master()
	c.createTopic(t, "mv", 2)
	c.raftmq("produce", "--topic", "mv", "--count", "50")

	moving := regexp.MustCompile(`(?m)^broker-a\s+moving\s+[1-9][0-9]*\s+(\S+)\s*$`)
	move := func(args ...string) string {
		t.Helper()
		return c.raftmq(append([]string{"group", "move-raft-log", "--group", "broker-a"}, args...)...)
	}
	if out := move(); !moving.MatchString(out) {
		t.Fatalf("move-raft-log printed:\n%s", out)
	}
	// The CLI prints the client's last answer. While the command answered
	// as soon as the move's entry applied, in about one run in ten the
	// first send ended on a slave's NOT_LEADER instead, the master and its
	// address unchanged. A client asks a replica only when its route names
	// no master, as right after a group starts until the name servers
	// confirm the master's claim; in 27 runs since the command waits for
	// the replicas' snapshots it did not recur. And the SDK now ends a
	// failed send on the master's answer, a slave's NOT_LEADER only a hop
	// within the try (client's TestASendFailsWithTheMastersAnswerNotAHops).
	// The test still asks again.
	clustertest.WaitFor(t, 10*time.Second, "a send refused as paused", func() bool {
		b, err := exec.Command(binPath, "produce", "--topic", "mv", "--body", "paused", "--timeout", "1s", "--namesrv", c.nsGRPC).CombinedOutput()
		if err == nil {
			t.Fatalf("produce while the raft log moves succeeded:\n%s", b)
		}
		return strings.Contains(string(b), "writes are paused while its Raft log moves")
	})
	if out := move("--abort"); !regexp.MustCompile(`(?m)^broker-a\s+wal\s+-\s+-\s*$`).MatchString(out) {
		t.Fatalf("move-raft-log --abort printed:\n%s", out)
	}
	c.raftmq("produce", "--topic", "mv", "--count", "50")

	out := move()
	if m := moving.FindStringSubmatch(out); m == nil || m[1] != "1,2,3" {
		t.Fatalf("move-raft-log printed:\n%s", out)
	}
	for k, i := range []int{(c.master() + 1) % 3, (c.master() + 2) % 3, c.master()} {
		c.moveReplica(i)
		if k < 2 {
			m := moving.FindStringSubmatch(move())
			if m == nil || len(strings.Split(m[1], ",")) != 2-k {
				t.Fatalf("after %d replicas moved, move-raft-log printed:\n%s", k+1, out)
			}
		}
	}
	if out := move(); !regexp.MustCompile(`(?m)^broker-a\s+commitlog\s+-\s+-\s*$`).MatchString(out) {
		t.Fatalf("move-raft-log once every replica moved printed:\n%s", out)
	}
	c.raftmq("produce", "--topic", "mv", "--count", "50")
	out = c.raftmq("cluster", "check")
	if strings.Count(out, " ok") != 3 {
		t.Fatalf("cluster check after the move:\n%s", out)
	}
	t.Logf("cluster check after the move:\n%s", out)
}

// The move as a drill, under the drills' load: the group (broker
// processes whose data dirs are lazyfs mounts) loses power, every replica
// at once, four times: right after the move begins, each replica started
// again with --raft-log wal, as an operator who pinned it would; once one
// replica has moved (restarted with --raft-log commitlog), it started
// with --raft-log auto and the others with wal; then all started with
// auto, the default, which moves the two still on their WAL as they
// start; and a second after the move has ended. The move survives each
// cut, ends, writes resume, no acknowledged message is lost and the
// replicas' commitlogs are identical.
func TestDrillGroupPowerLossDuringARaftLogMove(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skip(err.Error() + " (CI runs the power-loss drills as root)")
	}
	c := procClusterAddrs(t)
	c.diskOpts = &lazyfs.Options{}
	c.brokerFlags = []string{"--raft-log", "wal"}
	c.run()
	c.master()
	places := func(group pb.RaftLogPlace, moved map[int]bool) string {
		return fmt.Sprintf("the group %v, replicas %v in the commitlog, the others on their WAL", group, moved)
	}
	// cutAll cuts the group's power and starts it again, replica i with
	// --raft-log wal if pinned[i] (else auto), and waits for the places
	// of their Raft logs.
	cutAll := func(when string, pinned map[int]bool, group pb.RaftLogPlace, moved map[int]bool) {
		t.Helper()
		c.powerLoss(true, 0, 1, 2)
		c.brokerFlags, c.replicaFlags = nil, map[int][]string{}
		for i := range pinned {
			c.replicaFlags[i] = []string{"--raft-log", "wal"}
		}
		c.startAll(0, 1, 2)
		c.replicaFlags = nil
		c.master()
		clustertest.WaitFor(t, 30*time.Second, places(group, moved), func() bool {
			for i := range 3 {
				d := c.describe(i)
				want := pb.RaftLogPlace_RAFT_LOG_WAL
				if moved[i] {
					want = pb.RaftLogPlace_RAFT_LOG_COMMITLOG
				}
				if d == nil || d.GroupRaftLog != group || d.RaftLog != want {
					return false
				}
			}
			return true
		})
		t.Logf("power cut %s: %s", when, places(group, moved))
	}
	move := func() string {
		return c.raftmq("group", "move-raft-log", "--group", "broker-a")
	}
	moving := pb.RaftLogPlace_RAFT_LOG_MOVING
	all := map[int]bool{0: true, 1: true, 2: true}
	runDrillWith(t, "group power loss during a raft log move", c, func(h *History) {
		begun := time.Now()
		if out := move(); !strings.Contains(out, "moving") {
			t.Fatalf("move-raft-log printed:\n%s", out)
		}
		cutAll("right after the move began (restarted on --raft-log wal)", all, moving, nil)
		first := (c.master() + 1) % 3
		c.moveReplica(first)
		cutAll("after one replica moved (restarted on auto, the others on wal)", map[int]bool{(first + 1) % 3: true, (first + 2) % 3: true}, moving, map[int]bool{first: true})
		cutAll("once more (all restarted on auto: the two on their WAL move)", nil, moving, all)
		var last string
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("move-raft-log last printed:\n%s", last)
			}
		})
		// The master asks each voter where it keeps its log at the
		// address the name servers know, once they know it again.
		clustertest.WaitFor(t, 30*time.Second, "the move's end", func() bool {
			last = move()
			return regexp.MustCompile(`(?m)^broker-a\s+commitlog\s`).MatchString(last)
		})
		// The group takes no writes from the move's beginning until its
		// end, by design: an outage of the drill's own, with the cuts.
		ended := time.Now()
		h.Outage(begun, ended)
		clustertest.WaitFor(t, 10*time.Second, "an ack after the move's end", func() bool { return !h.FirstAckAfter(ended).IsZero() })
		time.Sleep(time.Second) // load on the moved group before its cut: a chosen moment
		cut := time.Now()
		cutAll("after the move ended, under load", nil, pb.RaftLogPlace_RAFT_LOG_COMMITLOG, all)
		h.Outage(cut, time.Now())
	})
}

// moveReplica restarts replica i with --raft-log commitlog, moving its
// WAL as it starts, and waits until it serves in the commitlog, has
// caught up, and the name servers list it again: the master asks it
// where it keeps its log at that address. Later starts are with the
// cluster's own flags.
func (c *procCluster) moveReplica(i int) {
	c.t.Helper()
	flags := c.brokerFlags
	c.brokerFlags = []string{"--raft-log", "commitlog"}
	c.stop(i)
	c.start(i)
	c.brokerFlags = flags
	clustertest.WaitFor(c.t, 30*time.Second, fmt.Sprintf("replica %d in the commitlog", i+1), func() bool {
		d := c.describe(i)
		return d != nil && d.RaftLog == pb.RaftLogPlace_RAFT_LOG_COMMITLOG
	})
	c.caughtUp(i)
	clustertest.WaitFor(c.t, 30*time.Second, fmt.Sprintf("replica %d listed", i+1), func() bool {
		return strings.Contains(c.raftmq("cluster", "list"), c.grpc[i])
	})
}
