package broker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/storage"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChildBroker() // never returns
	}
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// group is a broker group on loopback with tight Raft timings: its
// replicas run in this process, or, external, as child processes of the
// test binary that stop can kill -9. Tests observe both kinds the same way,
// through gRPC.
type group struct {
	t        testing.TB
	cfgs     []Config
	brokers  []*Broker   // in-process replicas; nil while stopped
	procs    []*exec.Cmd // external replicas; nil while stopped
	external bool
	conns    map[string]*grpc.ClientConn
}

// testConfig is replica id of a group whose replicas' addresses are grpc
// and raft (index id-1), under dir.
func testConfig(dir string, id int, grpcAddrs, raftAddrs []string) Config {
	peers := map[string]string{}
	for i, a := range raftAddrs {
		peers[strconv.Itoa(i+1)] = a
	}
	return Config{
		Group:     "broker-a",
		ReplicaID: int32(id),
		Dir:       filepath.Join(dir, fmt.Sprintf("r%d", id)),
		GRPCAddr:  grpcAddrs[id-1],
		Raft: cluster.RaftConfig{
			BindAddr: raftAddrs[id-1],
			Peers:    peers,
			// Tight, but with room for a loaded 2-core machine: a leader
			// steps down after 100 ms without a quorum (300 ms under the
			// race detector: race_test.go).
			HeartbeatTimeout:   raceScale * 100 * time.Millisecond,
			ElectionTimeout:    raceScale * 100 * time.Millisecond,
			LeaderLeaseTimeout: raceScale * 100 * time.Millisecond,
			CommitTimeout:      5 * time.Millisecond,
			TransportTimeout:   2 * time.Second,
			LogLevel:           "error",
		},
		Store: storage.Config{
			SegmentSize:         1 << 20,
			QueueEntriesPerFile: 1024,
			IndexSlots:          1024,
			IndexEntries:        4096,
			FlushInterval:       20 * time.Millisecond,
			CheckpointInterval:  50 * time.Millisecond,
		},
		MaxMessageSize:       64 << 10,
		EntryMaxBytes:        1 << 20,
		HoldCheckInterval:    30 * time.Second,
		OffsetCommitInterval: 20 * time.Millisecond,
		// Check-backs within a test's time.
		TransactionTimeout:       300 * time.Millisecond,
		TransactionCheckInterval: 300 * time.Millisecond,
		Logger:                   quiet,
	}
}

func newGroup(t testing.TB, n int, tweak func(*Config)) *group {
	return makeGroup(t, n, false, tweak)
}

func makeGroup(t testing.TB, n int, external bool, tweak func(*Config)) *group {
	t.Helper()
	dir := t.TempDir()
	grpcAddrs, raftAddrs := clustertest.FreeAddrs(t, n), clustertest.FreeAddrs(t, n)
	g := &group{t: t, external: external, conns: map[string]*grpc.ClientConn{}}
	for id := 1; id <= n; id++ {
		cfg := testConfig(dir, id, grpcAddrs, raftAddrs)
		if tweak != nil {
			tweak(&cfg)
		}
		g.cfgs = append(g.cfgs, cfg)
		g.brokers = append(g.brokers, nil)
		g.procs = append(g.procs, nil)
		// Clients dial lazily: made once here, read-only after, so
		// senders on other goroutines may use them.
		c, err := grpc.NewClient(cfg.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		g.conns[cfg.GRPCAddr] = c
	}
	for i := range g.cfgs {
		g.start(i)
	}
	t.Cleanup(g.close)
	return g
}

// start starts replica i (again).
func (g *group) start(i int) {
	g.t.Helper()
	if g.external {
		g.procs[i] = startChild(g.t, g.cfgs[i])
		return
	}
	b, err := Start(g.cfgs[i])
	if err != nil {
		g.t.Fatalf("start replica %d: %v", i+1, err)
	}
	g.brokers[i] = b
}

// stop stops replica i: Close in process, SIGKILL for a child.
func (g *group) stop(i int) {
	g.t.Helper()
	if g.external {
		g.procs[i].Process.Kill()
		g.procs[i].Wait()
		g.procs[i] = nil
		return
	}
	if err := g.brokers[i].Close(); err != nil {
		g.t.Logf("close replica %d: %v", i+1, err)
	}
	g.brokers[i] = nil
}

func (g *group) running(i int) bool { return g.brokers[i] != nil || g.procs[i] != nil }

func (g *group) close() {
	for _, c := range g.conns {
		c.Close()
	}
	for i := range g.cfgs {
		if g.running(i) {
			g.stop(i)
		}
	}
}

// describe asks replica i about itself; nil when it does not answer.
func (g *group) describe(i int) *pb.DescribeBrokerResponse {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d, err := g.client(i).DescribeBroker(ctx, &pb.DescribeBrokerRequest{})
	if err != nil {
		return nil
	}
	return d
}

// master waits for exactly one running replica to serve as master.
func (g *group) master() int {
	g.t.Helper()
	var m int
	waitFor(g.t, 10*time.Second, func() bool {
		m = -1
		for i := range g.cfgs {
			if !g.running(i) {
				continue
			}
			if d := g.describe(i); d != nil && d.Master {
				if m >= 0 {
					return false
				}
				m = i
			}
		}
		return m >= 0
	})
	return m
}

// client is a client of replica i; safe from any goroutine.
func (g *group) client(i int) pb.BrokerClient {
	return pb.NewBrokerClient(g.conns[g.cfgs[i].GRPCAddr])
}

// createTopic creates topic with queues queues through the master.
func (g *group) createTopic(name string, queues int32) {
	g.t.Helper()
	m := g.master()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := g.client(m).CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: name, ReadQueues: queues, WriteQueues: queues}})
	if err != nil {
		g.t.Fatalf("create topic %s: %v", name, err)
	}
	g.quiesce() // every replica knows it
}

// quiesce waits until every running replica has applied the same entries
// and holds the same commitlog end. Raft's applied index counts an entry
// handed to the state machine, a little before it is applied, so the
// in-process replicas' state machines must agree too (a slave's metadata
// lagged its applied index under load in CI).
func (g *group) quiesce() {
	g.t.Helper()
	waitFor(g.t, 20*time.Second, func() bool {
		_, ds := g.describeRunning()
		if ds == nil {
			return false
		}
		for _, d := range ds[1:] {
			if d.AppliedIndex != ds[0].AppliedIndex || d.CommitlogMaxOffset != ds[0].CommitlogMaxOffset {
				return false
			}
		}
		return g.stateMachinesAgree()
	})
}

// describeRunning describes every running replica: their indexes in
// g.cfgs and their answers, nil answers when one does not answer (or none
// runs).
func (g *group) describeRunning() ([]int, []*pb.DescribeBrokerResponse) {
	var ids []int
	var ds []*pb.DescribeBrokerResponse
	for i := range g.cfgs {
		if !g.running(i) {
			continue
		}
		d := g.describe(i)
		if d == nil {
			return nil, nil
		}
		ids, ds = append(ids, i), append(ds, d)
	}
	return ids, ds
}

// stateMachinesAgree says whether every in-process replica's state
// machine has applied the newest command any of them applied, or
// restored a snapshot that covers it.
func (g *group) stateMachinesAgree() bool {
	var newest uint64
	for _, b := range g.brokers {
		if b != nil {
			newest = max(newest, b.fsm.lastApplied.Load())
		}
	}
	for _, b := range g.brokers {
		if b == nil || b.fsm.lastApplied.Load() == newest {
			continue
		}
		if snap, _ := strconv.ParseUint(b.node.Raft.Stats()["last_snapshot_index"], 10, 64); snap < newest {
			return false
		}
	}
	return true
}

func waitFor(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	clustertest.WaitFor(t, d, "condition", cond)
}

// commitlogBytes is a replica's whole commitlog, segment files in order.
func commitlogBytes(t testing.TB, cfg Config, end int64) []byte {
	t.Helper()
	dir := filepath.Join(cfg.Dir, "store", "commitlog")
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, n := range names {
		if len(n.Name()) != 20 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	if int64(len(out)) < end {
		t.Fatalf("commitlog of replica %d is %d bytes, end %d", cfg.ReplicaID, len(out), end)
	}
	return out[:end]
}
