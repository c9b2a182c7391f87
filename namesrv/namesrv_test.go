package namesrv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/broker"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is name servers and one broker group of three, all gossiping.
type env struct {
	t       *testing.T
	ns      []*Server
	nsCfgs  []Config
	brokers []*broker.Broker
	bCfgs   []broker.Config
}

func startNameServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newEnv(t *testing.T, nameServers int) *env { return newEnvWith(t, nameServers, nil) }

// newEnvWith is newEnv with each name server's and broker's configuration
// passed through secure (nil: plaintext) before it starts.
func newEnvWith(t *testing.T, nameServers int, secure *security) *env {
	e := &env{t: t}
	for i := 0; i < nameServers; i++ {
		addrs := clustertest.FreeAddrs(t, 2)
		cfg := Config{Name: fmt.Sprintf("ns-%d", i), GRPCAddr: addrs[0], GossipAddr: addrs[1], FastGossip: true,
			RefreshInterval: 100 * time.Millisecond, HTTPAddr: "127.0.0.1:0", Logger: quiet}
		if i > 0 {
			cfg.Join = []string{e.nsCfgs[0].GossipAddr}
		}
		if secure != nil {
			cfg.TLS, cfg.SecretKey = secure.load(cluster.Identity{Cluster: "raftmq", Role: cluster.IdentityNameServer, ID: strconv.Itoa(i + 1)}), secure.gossipKey
		}
		e.nsCfgs = append(e.nsCfgs, cfg)
		e.ns = append(e.ns, startNameServer(t, cfg))
	}
	dir := t.TempDir()
	grpcs, rafts, gossips := clustertest.FreeAddrs(t, 3), clustertest.FreeAddrs(t, 3), clustertest.FreeAddrs(t, 3)
	peers := map[string]string{}
	for i, a := range rafts {
		peers[strconv.Itoa(i+1)] = a
	}
	for i := 0; i < 3; i++ {
		cfg := broker.Config{
			Group: "broker-a", ReplicaID: int32(i + 1), Dir: filepath.Join(dir, strconv.Itoa(i+1)), GRPCAddr: grpcs[i],
			Raft: cluster.RaftConfig{BindAddr: rafts[i], Peers: peers, HeartbeatTimeout: 100 * time.Millisecond,
				ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond, LogLevel: "error"},
			Store:          storage.Config{SegmentSize: 1 << 20, QueueEntriesPerFile: 1024, IndexSlots: 1024, IndexEntries: 4096},
			MaxMessageSize: 64 << 10, EntryMaxBytes: 1 << 20,
			Gossip: broker.GossipConfig{BindAddr: gossips[i], Join: []string{e.nsCfgs[0].GossipAddr}, Fast: true},
			Logger: quiet,
		}
		if secure != nil {
			cfg.TLS, cfg.Gossip.SecretKey = secure.load(cluster.Identity{Cluster: "raftmq", Role: cluster.IdentityBroker, Group: "broker-a", ID: strconv.Itoa(i + 1)}), secure.gossipKey
		}
		e.bCfgs = append(e.bCfgs, cfg)
		e.brokers = append(e.brokers, nil)
		e.startBroker(i)
	}
	t.Cleanup(e.close)
	return e
}

func (e *env) startBroker(i int) {
	b, err := broker.Start(e.bCfgs[i])
	if err != nil {
		e.t.Fatal(err)
	}
	e.brokers[i] = b
}

func (e *env) close() {
	for i, b := range e.brokers {
		if b != nil {
			b.Close()
			e.brokers[i] = nil
		}
	}
	for i, s := range e.ns {
		if s != nil {
			s.Close()
			e.ns[i] = nil
		}
	}
}

func (e *env) master() int {
	m := -1
	clustertest.WaitFor(e.t, 10*time.Second, "a master", func() bool {
		for i, b := range e.brokers {
			if b != nil && b.IsMaster() {
				m = i
				return true
			}
		}
		return false
	})
	return m
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (e *env) nsClient(i int) pb.NameServerClient {
	return pb.NewNameServerClient(dial(e.t, e.ns[i].Addr()))
}

func route(c pb.NameServerClient, topic string) (*pb.RouteResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.GetRoute(ctx, &pb.GetRouteRequest{Topic: topic})
}

// masterIn is the master replica id a route shows for its one group.
func masterIn(r *pb.RouteResponse) int32 {
	if r == nil || len(r.Groups) != 1 {
		return 0
	}
	return r.Groups[0].MasterId
}

func TestRoutesFollowTopicsMastersAndReplicas(t *testing.T) {
	e := newEnv(t, 1)
	ns := e.nsClient(0)
	m := e.master()
	if _, err := route(ns, "orders"); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown topic: %v", err)
	} else if reason, _ := pb.ReasonOf(err); reason != pb.ErrorReason_TOPIC_NOT_FOUND {
		t.Fatalf("unknown topic reason: %v", reason)
	}
	bc := pb.NewBrokerClient(dial(t, e.bCfgs[m].GRPCAddr))
	if _, err := bc.CreateTopic(context.Background(), &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "orders", ReadQueues: 4, WriteQueues: 4}}); err != nil {
		t.Fatal(err)
	}
	var r *pb.RouteResponse
	clustertest.WaitFor(t, 2*time.Second, "created topic routable", func() bool {
		var err error
		r, err = route(ns, "orders")
		return err == nil && masterIn(r) == int32(m+1) && len(r.Groups[0].Replicas) == 3
	})
	if g := r.Groups[0]; g.Group != "broker-a" || g.WriteQueues != 4 || g.Perm != 6 {
		t.Fatalf("route: %+v", g)
	}

	// The master dies: routes show the new one within 3 s, without it.
	e.brokers[m].Close()
	e.brokers[m] = nil
	clustertest.WaitFor(t, 3*time.Second, "new master in routes", func() bool {
		r, err := route(ns, "orders")
		return err == nil && masterIn(r) != 0 && masterIn(r) != int32(m+1) && len(r.Groups[0].Replicas) == 2
	})
	// It comes back under the same name.
	e.startBroker(m)
	clustertest.WaitFor(t, 5*time.Second, "restarted replica back in routes", func() bool {
		r, err := route(ns, "orders")
		return err == nil && len(r.Groups[0].Replicas) == 3 && masterIn(r) != 0
	})
}

func TestNameServerRestartAndTwoNameServersAgree(t *testing.T) {
	e := newEnv(t, 2)
	m := e.master()
	bc := pb.NewBrokerClient(dial(t, e.bCfgs[m].GRPCAddr))
	for _, topic := range []string{"a", "b"} {
		if _, err := bc.CreateTopic(context.Background(), &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: topic, ReadQueues: 2, WriteQueues: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	c0, c1 := e.nsClient(0), e.nsClient(1)
	clustertest.WaitFor(t, 3*time.Second, "both name servers route both topics", func() bool {
		for _, c := range []pb.NameServerClient{c0, c1} {
			for _, topic := range []string{"a", "b"} {
				if r, err := route(c, topic); err != nil || masterIn(r) != int32(m+1) {
					return false
				}
			}
		}
		return true
	})
	// Restart name server 1 on its addresses: it knows nothing, then all.
	e.ns[1].Close()
	cfg := e.nsCfgs[1]
	cfg.Join = []string{e.nsCfgs[0].GossipAddr}
	e.ns[1] = startNameServer(t, cfg)
	c1 = e.nsClient(1)
	clustertest.WaitFor(t, 5*time.Second, "restarted name server has complete routes", func() bool {
		for _, topic := range []string{"a", "b"} {
			if r, err := route(c1, topic); err != nil || masterIn(r) != int32(m+1) || len(r.Groups[0].Replicas) != 3 {
				return false
			}
		}
		info, err := c1.GetClusterInfo(context.Background(), &pb.GetClusterInfoRequest{})
		return err == nil && len(info.Groups) == 1 && len(info.NameServers) == 2
	})
	names, err := c1.ListTopics(context.Background(), &pb.ListTopicsRequest{})
	if err != nil || len(names.Topics) != 2 {
		t.Fatalf("topics: %v %v", names, err)
	}
	// Its metrics and health.
	// (The second name server learns the pool on its own gossip: polled.)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	wants := []string{"raftmq_namesrv_members 5", "raftmq_namesrv_groups 1", "raftmq_namesrv_groups_with_master 1", "raftmq_namesrv_topics 2"}
	var body []byte
	clustertest.WaitFor(t, 5*time.Second, "the second name server's metrics", func() bool {
		resp, err := hc.Get("http://" + e.ns[1].OpsAddr() + "/metrics")
		if err != nil {
			return false
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range wants {
			if !strings.Contains(string(body), want) {
				return false
			}
		}
		return true
	})
	if resp, err := hc.Get("http://" + e.ns[1].OpsAddr() + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

func TestWatchRoutesDeliversMasterChange(t *testing.T) {
	e := newEnv(t, 1)
	m := e.master()
	bc := pb.NewBrokerClient(dial(t, e.bCfgs[m].GRPCAddr))
	if _, err := bc.CreateTopic(context.Background(), &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "w", ReadQueues: 1, WriteQueues: 1}}); err != nil {
		t.Fatal(err)
	}
	// The stream's context bounds every Recv: a watch that stops
	// delivering fails the test at the deadline instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := e.nsClient(0).WatchRoutes(ctx, &pb.WatchRoutesRequest{Topics: []string{"w"}})
	if err != nil {
		t.Fatal(err)
	}
	// Routes arrive until one names the master; then the master moves.
	for {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if masterIn(r) == int32(m+1) {
			break
		}
	}
	if err := e.brokers[m].TransferLeadership(); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("no master change delivered: %v", err)
		}
		if id := masterIn(r); id != 0 && id != int32(m+1) {
			break
		}
	}
}
