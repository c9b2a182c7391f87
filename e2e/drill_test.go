package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/client"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
)

var binPath string

// TestMain builds the raftmq binary the drills run.
func TestMain(m *testing.M) {
	bin, cleanup, err := clustertest.BuildRaftmq("../cmd/raftmq")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// procCluster is a name server and one broker group of 3 replicas, each a
// raftmq process on 127.0.0.1.
type procCluster struct {
	t        *testing.T
	dir      string
	nsGRPC   string
	nsGossip string
	grpc     []string
	raft     []string
	gossip   []string
	procs    []*exec.Cmd // brokers; nil while down
	ns       *exec.Cmd
	clients  []pb.BrokerClient
}

func startProc(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("%v did not start: %v", args, err)
	}
	return cmd
}

func newProcCluster(t *testing.T) *procCluster {
	ns := clustertest.FreeAddrs(t, 2)
	c := &procCluster{t: t, dir: t.TempDir(), nsGRPC: ns[0], nsGossip: ns[1],
		grpc: clustertest.FreeAddrs(t, 3), raft: clustertest.FreeAddrs(t, 3), gossip: clustertest.FreeAddrs(t, 3), procs: make([]*exec.Cmd, 3)}
	c.ns = startProc(t, "namesrv", "--grpc", c.nsGRPC, "--gossip", c.nsGossip, "--log-level", "error")
	for i := range c.procs {
		conn, err := grpc.NewClient(c.grpc[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		c.clients = append(c.clients, pb.NewBrokerClient(conn))
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.procs {
			c.kill(i)
		}
		c.ns.Process.Kill()
		c.ns.Wait()
	})
	return c
}

func (c *procCluster) start(i int) {
	var peers []string
	for j, a := range c.raft {
		peers = append(peers, fmt.Sprintf("%d=%s", j+1, a))
	}
	c.procs[i] = startProc(c.t, "broker", "--group", "broker-a", "--id", fmt.Sprint(i+1), "--dir", filepath.Join(c.dir, fmt.Sprint(i+1)),
		"--grpc", c.grpc[i], "--raft", c.raft[i], "--peers", strings.Join(peers, ","), "--gossip", c.gossip[i],
		"--join", c.nsGossip, "--segment-size", "8MiB", "--raft-timeout", "500ms", "--log-level", "error")
}

// kill stops replica i with SIGKILL.
func (c *procCluster) kill(i int) {
	if c.procs[i] != nil {
		c.procs[i].Process.Kill()
		c.procs[i].Wait()
		c.procs[i] = nil
	}
}

func (c *procCluster) describe(i int) *pb.DescribeBrokerResponse {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	d, err := c.clients[i].DescribeBroker(ctx, &pb.DescribeBrokerRequest{})
	if err != nil {
		return nil
	}
	return d
}

func (c *procCluster) master() int {
	m := -1
	clustertest.WaitFor(c.t, 15*time.Second, "a master", func() bool {
		for i := range c.procs {
			if c.procs[i] != nil {
				if d := c.describe(i); d != nil && d.Master {
					m = i
					return true
				}
			}
		}
		return false
	})
	return m
}

// checkReplicas waits for the replicas to apply the same log and compares
// their commitlogs byte for byte.
func (c *procCluster) checkReplicas() {
	c.t.Helper()
	var end int64
	clustertest.WaitFor(c.t, 20*time.Second, "replicas in step", func() bool {
		var ref *pb.DescribeBrokerResponse
		for i := range c.procs {
			d := c.describe(i)
			if d == nil || (ref != nil && (d.AppliedIndex != ref.AppliedIndex || d.CommitlogMaxOffset != ref.CommitlogMaxOffset)) {
				return false
			}
			ref = d
		}
		end = ref.CommitlogMaxOffset
		return true
	})
	var first []byte
	for i := range c.procs {
		log := commitlog(c.t, filepath.Join(c.dir, fmt.Sprint(i+1), "store", "commitlog"), end)
		if i == 0 {
			first = log
		} else if !bytes.Equal(first, log) {
			c.t.Fatalf("replica %d's commitlog differs from replica 1's", i+1)
		}
	}
}

func commitlog(t *testing.T, dir string, end int64) []byte {
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, n := range names {
		if len(n.Name()) == 20 {
			b, err := os.ReadFile(filepath.Join(dir, n.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b...)
		}
	}
	if int64(len(out)) < end {
		t.Fatalf("commitlog in %s shorter than %d", dir, end)
	}
	return out[:end]
}

// runDrill runs a fault against a process cluster under load from 3
// producers (each sharding onto its own queue) read by 2 push consumers,
// and checks the history: nothing acknowledged lost, nothing unexpected
// consumed, no producer's order broken within a queue, every write gap
// under 10 s, and the replicas byte-identical at the end.
func runDrill(t *testing.T, name string, fault func(c *procCluster)) {
	c := newProcCluster(t)
	m := c.master()
	if _, err := c.clients[m].CreateTopic(context.Background(), &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "drill", ReadQueues: 4, WriteQueues: 4}}); err != nil {
		t.Fatal(err)
	}
	h := &History{}
	var consumers []*client.PushConsumer
	for _, id := range []string{"c1", "c2"} {
		pc, err := client.NewPushConsumer(client.PushConfig{ConsumeFrom: client.ConsumeFromFirst, ClientID: id,
			RebalanceInterval: 200 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, CommitInterval: 100 * time.Millisecond,
			PullSuspend: time.Second, ErrorBackoff: 200 * time.Millisecond}, client.WithNameServers(c.nsGRPC), client.WithGroup("drill"))
		if err != nil {
			t.Fatal(err)
		}
		pc.Subscribe("drill", "*", func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			for _, msg := range msgs {
				h.Delivered(Delivery{Body: string(msg.Body), Queue: fmt.Sprintf("%s/%d", msg.Queue.Group, msg.Queue.QueueID), Offset: msg.QueueOffset})
			}
			return client.ConsumeSuccess
		})
		if err := pc.Start(); err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, pc)
	}
	defer func() {
		for _, pc := range consumers {
			pc.Shutdown()
		}
	}()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }); wg.Wait() }
	defer halt()
	for p := 0; p < 3; p++ {
		prod, err := client.NewProducer(client.WithNameServers(c.nsGRPC), client.WithSendTimeout(5*time.Second), client.WithRetries(8))
		if err != nil {
			t.Fatal(err)
		}
		prod.Start()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer prod.Shutdown()
			name := fmt.Sprint("p", p)
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf("%s-%d", name, seq)
				// A sharding key per producer: its messages share a queue,
				// so their order there can be checked.
				r, err := prod.SendOrderly(context.Background(), &client.Message{Topic: "drill", Body: []byte(body)}, name)
				s := Send{Producer: name, Seq: seq, Body: body, At: time.Now(), Outcome: Unknown}
				if err == nil {
					s.Outcome, s.MsgID, s.Queue, s.Offset = Acked, r.MsgID, fmt.Sprintf("%s/%d", r.Queue.Group, r.Queue.QueueID), r.QueueOffset
				}
				h.Sent(s)
			}
		}()
	}
	time.Sleep(time.Second) // load before the fault: a chosen moment, not a wait for a condition
	fault(c)
	time.Sleep(time.Second) // load after it
	halt()
	clustertest.WaitFor(t, 30*time.Second, "every acked message consumed", h.Consumed)
	r := h.Check()
	t.Logf("drill %s: %s", name, r)
	if !r.OK() {
		t.Fatalf("drill failed: lost %v, unexpected %v, order %v", r.Lost[:min(len(r.Lost), 10)], r.Unexpected[:min(len(r.Unexpected), 10)], r.OrderBreaks[:min(len(r.OrderBreaks), 10)])
	}
	if r.Acked < 100 {
		t.Fatalf("only %d sends acknowledged", r.Acked)
	}
	for _, g := range r.WriteGaps {
		if g > 10*time.Second {
			t.Fatalf("a write gap of %v (the limit is 10 s)", g)
		}
	}
	c.checkReplicas()
}

// Drill 2: kill -9 the master four times, each back after a 1 s outage.
func TestDrillMasterKilledRepeatedly(t *testing.T) {
	runDrill(t, "master kill x4", func(c *procCluster) {
		for round := 0; round < 4; round++ {
			victim := c.master()
			c.kill(victim)
			time.Sleep(time.Second) // the outage
			c.start(victim)
			time.Sleep(time.Second) // traffic between faults
		}
	})
}

// Drill 3: stop a follower for 3 s while writes go on, then start it: it
// catches up and ends byte-identical.
func TestDrillFollowerStoppedAndCaughtUp(t *testing.T) {
	runDrill(t, "follower down 3 s", func(c *procCluster) {
		follower := (c.master() + 1) % 3
		c.kill(follower)
		time.Sleep(3 * time.Second) // the outage
		c.start(follower)
	})
}

// Drill 5: kill the name server for 2 s: clients go on with the routes
// they hold, and the restarted name server learns the cluster again.
func TestDrillNameServerKilled(t *testing.T) {
	runDrill(t, "name server down 2 s", func(c *procCluster) {
		c.ns.Process.Kill()
		c.ns.Wait()
		time.Sleep(2 * time.Second) // the outage
		c.ns = startProc(c.t, "namesrv", "--grpc", c.nsGRPC, "--gossip", c.nsGossip, "--join", c.gossip[0], "--log-level", "error")
	})
}
