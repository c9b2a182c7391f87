package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
)

// raftmq runs the CLI against the cluster's name server and returns its
// output, failing the test when it fails.
func (c *procCluster) raftmq(args ...string) string {
	c.t.Helper()
	out, err := exec.Command(binPath, append(args, "--namesrv", c.nsGRPC)...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("raftmq %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// replace stands in for an operator replacing the dead replica i: it
// removes it from the group, starts a broker with an empty data dir as
// replica id on new ports with --join-group, and adds it, through the CLI.
func (c *procCluster) replace(i, id int) {
	t := c.t
	out := c.raftmq("group", "remove-replica", "--group", "broker-a", "--id", fmt.Sprint(c.id(i)))
	t.Logf("remove-replica %d:\n%s", c.id(i), out)
	if c.ids == nil {
		c.ids = []int{1, 2, 3}
	}
	if c.joining == nil {
		c.joining = map[int]bool{}
	}
	addrs := clustertest.FreeAddrs(t, 3)
	c.ids[i], c.joining[i] = id, true
	c.grpc[i], c.raft[i], c.gossip[i] = addrs[0], addrs[1], addrs[2]
	conn, err := grpc.NewClient(c.grpc[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.clients[i] = pb.NewBrokerClient(conn)
	c.start(i)
	out = c.raftmq("group", "add-replica", "--group", "broker-a", "--id", fmt.Sprint(id),
		"--raft", c.raft[i], "--grpc", c.grpc[i], "--timeout", "60s")
	t.Logf("add-replica %d:\n%s", id, out)
	if !strings.Contains(out, fmt.Sprintf("\n%d ", id)) || strings.Contains(out, "non-voter") {
		t.Fatalf("replica %d is not a voter after add-replica:\n%s", id, out)
	}
}

// The drill of a replaced disk: a follower dies with its data, and an
// operator replaces it under load with a fresh replica of another id,
// which catches up while the group takes writes. Nothing acknowledged is
// lost, the three replicas end byte-identical, and the name server's
// cluster listing follows: the new replica in, the dead one out.
func TestDrillReplaceDeadReplica(t *testing.T) {
	c := newProcCluster(t)
	runDrill(t, "dead replica replaced", c, func() {
		dead := (c.master() + 1) % 3
		gone := c.id(dead)
		c.kill(dead)
		time.Sleep(500 * time.Millisecond) // dead a while under load
		c.replace(dead, 4)
		clustertest.WaitFor(t, 30*time.Second, "the cluster listing to follow the new membership", func() bool {
			out, err := exec.Command(binPath, "cluster", "list", "--namesrv", c.nsGRPC).CombinedOutput()
			return err == nil && c.listsReplica(string(out), 4) && !c.listsReplica(string(out), gone)
		})
		// The new replica can lead: hand it the master role. A transfer
		// fails while the target is not caught up within an election
		// timeout, which a replica added under load on a slow machine may
		// not be yet (CI, 2026-12-05), or while another is in progress
		// (CI, 2026-12-07); the broker answers both Unavailable, gRPC's
		// code for "try again": an operator tries again, and so does the
		// drill, until a deadline.
		var out string
		clustertest.WaitFor(t, 30*time.Second, "transfer-leader to replica 4", func() bool {
			b, err := exec.Command(binPath, "group", "transfer-leader", "--group", "broker-a", "--to", "4", "--namesrv", c.nsGRPC).CombinedOutput()
			out = string(b)
			retry := strings.HasSuffix(strings.TrimSpace(out), "(Unavailable)")
			if err != nil && !retry {
				t.Fatalf("raftmq group transfer-leader --to 4: %v\n%s", err, out)
			}
			return err == nil
		})
		if !regexp.MustCompile(`(?m)^4\s+master\s`).MatchString(out) {
			t.Fatalf("replica 4 is not master after transfer-leader:\n%s", out)
		}
		if m := c.master(); c.id(m) != 4 {
			t.Fatalf("replica %d is master after the transfer to 4", c.id(m))
		}
	})
}

// listsReplica reports whether a `cluster list` output has a line for
// broker-a's replica id.
func (c *procCluster) listsReplica(out string, id int) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "broker-a" && f[1] == fmt.Sprint(id) {
			return true
		}
	}
	return false
}

// A replica removed from its group while it runs leaves the gossip pool:
// the name server's cluster listing drops it at once, though its process
// goes on until its operator stops it, and the group of two takes writes.
// Before, it went on announcing itself as a slave of the group it had
// left (issue #16 item 3: routes and cluster list follow the membership).
func TestRemovedRunningReplicaLeavesTheListing(t *testing.T) {
	c := newProcCluster(t)
	removed := (c.master() + 1) % 3
	clustertest.WaitFor(t, 15*time.Second, "all three replicas listed", func() bool {
		out, err := exec.Command(binPath, "cluster", "list", "--namesrv", c.nsGRPC).CombinedOutput()
		return err == nil && c.listsReplica(string(out), 1) && c.listsReplica(string(out), 2) && c.listsReplica(string(out), 3)
	})
	c.raftmq("group", "remove-replica", "--group", "broker-a", "--id", fmt.Sprint(c.id(removed)))
	clustertest.WaitFor(t, 10*time.Second, "the removed replica to leave the listing", func() bool {
		out, err := exec.Command(binPath, "cluster", "list", "--namesrv", c.nsGRPC).CombinedOutput()
		return err == nil && !c.listsReplica(string(out), c.id(removed))
	})
	if err := c.procs[removed].Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the removed replica's process: %v", err)
	}
	c.createTopic(t, "after-removal", 1)
	out := c.raftmq("produce", "--topic", "after-removal", "--body", "after")
	if !strings.HasPrefix(out, "OK ") {
		t.Fatalf("a send to the group of two: %s", out)
	}
}
