package e2e

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// An operator begins moving a WAL group's Raft log into the commitlog
// with the CLI, on broker processes: the group then refuses sends with
// WRITES_PAUSED until the move is aborted, and takes them again after.
func TestMoveRaftLogPausesWritesUntilAborted(t *testing.T) {
	c := procClusterAddrs(t)
	c.brokerFlags = []string{"--raft-log", "wal"}
	c.run()
	c.master()
	c.createTopic(t, "mv", 2)
	c.raftmq("produce", "--topic", "mv", "--body", "before")

	out := c.raftmq("group", "move-raft-log", "--group", "broker-a")
	if !regexp.MustCompile(`(?m)^broker-a\s+moving\s+[1-9][0-9]*\s*$`).MatchString(out) {
		t.Fatalf("move-raft-log printed:\n%s", out)
	}
	// The CLI prints the client's last answer. In about one run in ten
	// the first send right after the move ended on a slave's NOT_LEADER
	// instead (the master and its address unchanged; why the client
	// asked a slave is not known yet), so the test asks again.
	clustertest.WaitFor(t, 10*time.Second, "a send refused as paused", func() bool {
		b, err := exec.Command(binPath, "produce", "--topic", "mv", "--body", "paused", "--timeout", "1s", "--namesrv", c.nsGRPC).CombinedOutput()
		if err == nil {
			t.Fatalf("produce while the raft log moves succeeded:\n%s", b)
		}
		return strings.Contains(string(b), "writes are paused while its Raft log moves")
	})

	out = c.raftmq("group", "move-raft-log", "--group", "broker-a", "--abort")
	if !regexp.MustCompile(`(?m)^broker-a\s+wal\s+-\s*$`).MatchString(out) {
		t.Fatalf("move-raft-log --abort printed:\n%s", out)
	}
	c.raftmq("produce", "--topic", "mv", "--body", "after")
}
