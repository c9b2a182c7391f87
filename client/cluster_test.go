package client

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/raftmq/raftmq/broker"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/namesrv"
	"github.com/raftmq/raftmq/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testCluster is an in-process cluster on loopback: a name server and
// broker groups of replicas, gossiping, with tight timings.
type testCluster struct {
	t       testing.TB
	ns      *namesrv.Server
	brokers map[string][]*broker.Broker // by group
	cfgs    map[string][]broker.Config
}

func newCluster(t testing.TB, groups, replicas int, tweak func(*broker.Config)) *testCluster {
	t.Helper()
	nsAddrs := clustertest.FreeAddrs(t, 2)
	ns, err := namesrv.Start(namesrv.Config{GRPCAddr: nsAddrs[0], GossipAddr: nsAddrs[1], FastGossip: true,
		RefreshInterval: 100 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, ns: ns, brokers: map[string][]*broker.Broker{}, cfgs: map[string][]broker.Config{}}
	// The data dir first: cleanups run last-registered first, and the
	// brokers must stop before their directory is removed.
	dir := t.TempDir()
	t.Cleanup(c.close)
	for g := 0; g < groups; g++ {
		name := "broker-" + string(rune('a'+g))
		grpcs, rafts, gossips := clustertest.FreeAddrs(t, replicas), clustertest.FreeAddrs(t, replicas), clustertest.FreeAddrs(t, replicas)
		peers := map[string]string{}
		for i, a := range rafts {
			peers[strconv.Itoa(i+1)] = a
		}
		for i := 0; i < replicas; i++ {
			cfg := broker.Config{
				Group: name, ReplicaID: int32(i + 1), Dir: filepath.Join(dir, name, strconv.Itoa(i+1)), GRPCAddr: grpcs[i],
				Raft: cluster.RaftConfig{BindAddr: rafts[i], Peers: peers, HeartbeatTimeout: 100 * time.Millisecond,
					ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond,
					CommitTimeout: 5 * time.Millisecond, LogLevel: "error"},
				Store:          storage.Config{SegmentSize: 1 << 20, QueueEntriesPerFile: 1024, IndexSlots: 1024, IndexEntries: 4096},
				MaxMessageSize: 64 << 10, EntryMaxBytes: 1 << 20,
				DelayLevels: "50ms 100ms 150ms 200ms 250ms", ScheduleInterval: 20 * time.Millisecond,
				Gossip: broker.GossipConfig{BindAddr: gossips[i], Join: []string{nsAddrs[1]}, Fast: true},
				Logger: quiet,
			}
			if tweak != nil {
				tweak(&cfg)
			}
			c.cfgs[name] = append(c.cfgs[name], cfg)
			c.brokers[name] = append(c.brokers[name], nil)
			c.start(name, i)
		}
	}
	return c
}

func (c *testCluster) start(group string, i int) {
	b, err := broker.Start(c.cfgs[group][i])
	if err != nil {
		c.t.Fatal(err)
	}
	c.brokers[group][i] = b
}

func (c *testCluster) stop(group string, i int) {
	c.brokers[group][i].Close()
	c.brokers[group][i] = nil
}

func (c *testCluster) close() {
	for _, bs := range c.brokers {
		for i, b := range bs {
			if b != nil {
				b.Close()
				bs[i] = nil
			}
		}
	}
	c.ns.Close()
}

// master waits for the group's master.
func (c *testCluster) master(group string) int {
	m := -1
	clustertest.WaitFor(c.t, 10*time.Second, "master of "+group, func() bool {
		for i, b := range c.brokers[group] {
			if b != nil && b.IsMaster() {
				m = i
				return true
			}
		}
		return false
	})
	return m
}

// createTopic creates topic on every group and waits until the name
// server routes it.
func (c *testCluster) createTopic(topic string, queues int32) {
	c.t.Helper()
	var groups []string
	for group := range c.brokers {
		groups = append(groups, group)
	}
	c.createTopicIn(topic, queues, groups...)
}

// createTopicIn creates topic on the named groups and waits until the
// name server routes it on each of them, with a master.
func (c *testCluster) createTopicIn(topic string, queues int32, groups ...string) {
	c.t.Helper()
	p := c.producer()
	defer p.Shutdown()
	for _, group := range groups {
		// The master may change between finding it and the call (an
		// election on a loaded machine: NOT_LEADER); find it again.
		var lastErr error
		clustertest.WaitFor(c.t, 10*time.Second, "topic "+topic+" created on "+group, func() bool {
			b, err := p.r.broker(c.brokers[group][c.master(group)].Addr())
			if err != nil {
				c.t.Fatal(err)
			}
			lastErr = createTopicOn(b, topic, queues)
			if reason, _ := pb.ReasonOf(lastErr); lastErr != nil && reason != pb.ErrorReason_NOT_LEADER {
				c.t.Fatalf("creating %s on %s: %v", topic, group, lastErr)
			}
			return lastErr == nil
		})
	}
	clustertest.WaitFor(c.t, 5*time.Second, "route of "+topic, func() bool {
		r, err := p.r.refresh(context.Background(), topic)
		if err != nil {
			return false
		}
		routed := 0
		for _, g := range r.Groups {
			if slices.Contains(groups, g.Group) {
				if g.MasterId == 0 {
					return false
				}
				routed++
			}
		}
		return routed == len(groups)
	})
}

func (c *testCluster) producer(opts ...Option) *Producer {
	c.t.Helper()
	p, err := NewProducer(append([]Option{WithNameServers(c.ns.Addr()), WithLogger(quiet)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		c.t.Fatal(err)
	}
	return p
}

func (c *testCluster) pullConsumer(group string, opts ...Option) *PullConsumer {
	c.t.Helper()
	pc, err := NewPullConsumer(append([]Option{WithNameServers(c.ns.Addr()), WithGroup(group), WithLogger(quiet)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		c.t.Fatal(err)
	}
	return pc
}

// drain pulls every queue of topic from the start to its end.
func drain(t testing.TB, pc *PullConsumer, topic string) []*MessageExt {
	t.Helper()
	ctx := context.Background()
	mqs, err := pc.Queues(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []*MessageExt
	for _, mq := range mqs {
		for off := int64(0); ; {
			r, err := pc.Pull(ctx, mq, "*", off, 32)
			if err != nil {
				t.Fatalf("pull %v at %d: %v", mq, off, err)
			}
			out = append(out, r.Messages...)
			if r.Status == PullNoNewMessage {
				break
			}
			if r.NextOffset == off && r.Status != PullFound {
				t.Fatalf("pull %v at %d: stuck with status %v", mq, off, r.Status)
			}
			off = r.NextOffset
		}
	}
	return out
}

func bodyOf(i int) string { return fmt.Sprintf("message-%d", i) }
