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
	c.brokerFlags = []string{"--raft-log", "commitlog"}
	for k, i := range []int{(c.master() + 1) % 3, (c.master() + 2) % 3, c.master()} {
		c.stop(i)
		c.start(i)
		clustertest.WaitFor(t, 20*time.Second, fmt.Sprintf("replica %d in the commitlog", i+1), func() bool {
			d := c.describe(i)
			return d != nil && d.RaftLog == pb.RaftLogPlace_RAFT_LOG_COMMITLOG
		})
		c.caughtUp(i)
		// The master asks it where it keeps its log at the address the
		// name servers know, once they know it again.
		clustertest.WaitFor(t, 20*time.Second, fmt.Sprintf("replica %d listed", i+1), func() bool {
			return strings.Contains(c.raftmq("cluster", "list"), c.grpc[i])
		})
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
