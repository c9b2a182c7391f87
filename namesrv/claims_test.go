package namesrv

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
)

// security is a test cluster's CA and gossip key.
type security struct {
	t         *testing.T
	ca        *cluster.CA
	gossipKey []byte
}

func newSecurity(t *testing.T) *security {
	ca, err := cluster.NewCA("raftmq", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &security{t: t, ca: ca, gossipKey: []byte("0123456789abcdef0123456789abcdef")}
}

// load issues a certificate for id and loads it as a node's TLS.
func (s *security) load(id cluster.Identity) *cluster.TLS {
	s.t.Helper()
	f, err := s.ca.IssueFiles(s.t.TempDir(), id, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		s.t.Fatal(err)
	}
	tl, err := cluster.LoadTLS(f)
	if err != nil {
		s.t.Fatal(err)
	}
	return tl
}

// fakeBroker answers DescribeBroker as the master of broker-a at a far
// higher term, with a topic table of its own.
type fakeBroker struct {
	pb.UnimplementedBrokerServer
}

func (fakeBroker) DescribeBroker(context.Context, *pb.DescribeBrokerRequest) (*pb.DescribeBrokerResponse, error) {
	return &pb.DescribeBrokerResponse{Group: "broker-a", ReplicaId: 9, Master: true, Term: 1000, TopicsVersion: 1 << 40,
		Topics: []*pb.TopicConfig{{Name: "orders", ReadQueues: 1, WriteQueues: 1, Perm: 6}, {Name: "stolen", ReadQueues: 1, WriteQueues: 1, Perm: 6}}}, nil
}

// serveFake serves fakeBroker with creds and returns its address.
func serveFake(t *testing.T, creds credentials.TransportCredentials) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(creds))
	pb.RegisterBrokerServer(srv, fakeBroker{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// The route hijack through gossip, by a member that holds the gossip key:
// it joins as "replica 9 of broker-a, master at term 1000, topic table
// version 2^40" and serves a broker that says so, over TLS with a valid
// certificate that names a user, or another replica of the group, or over
// plaintext. The secured name server's routes never name it: the master
// stays the real one, and its topic table is not taken.
func TestSecuredNameServerIgnoresUnconfirmedClaims(t *testing.T) {
	sec := newSecurity(t)
	e := newEnvWith(t, 1, sec)
	m := e.master()
	bc := pb.NewBrokerClient(dialTLS(t, e.bCfgs[m].GRPCAddr, sec))
	if _, err := bc.CreateTopic(context.Background(), &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "orders", ReadQueues: 4, WriteQueues: 4}}); err != nil {
		t.Fatal(err)
	}
	nsc := pb.NewNameServerClient(dialTLS(t, e.ns[0].Addr(), sec))
	clustertest.WaitFor(t, 5*time.Second, "the topic routable through the secured name server", func() bool {
		r, err := route(nsc, "orders")
		return err == nil && masterIn(r) == int32(m+1) && len(r.Groups[0].Replicas) == 3
	})

	fakes := map[string]string{
		"user certificate":        serveFake(t, credentials.NewTLS(sec.load(cluster.Identity{Cluster: "raftmq", Role: cluster.IdentityUser, ID: "mallory"}).ServerConfig())),
		"replica 2's certificate": serveFake(t, credentials.NewTLS(sec.load(cluster.Identity{Cluster: "raftmq", Role: cluster.IdentityBroker, Group: "broker-a", ID: "2"}).ServerConfig())),
		"plaintext":               serveFake(t, insecure.NewCredentials()),
	}
	for name, addr := range fakes {
		ms, err := cluster.StartMembership(cluster.MembershipConfig{Name: "fake-" + name, BindAddr: clustertest.FreeAddrs(t, 1)[0],
			Join: []string{e.nsCfgs[0].GossipAddr}, SecretKey: sec.gossipKey, Fast: true, Logger: quiet,
			Meta: cluster.MemberMeta{Role: cluster.RoleBroker, Cluster: "raftmq", GRPCAddr: addr, Group: "broker-a", ReplicaID: 9, Leader: true, Term: 1000, TopicsVersion: 1 << 40}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ms.Close() })
	}
	// The fakes are in the pool (the key lets them in) ...
	clustertest.WaitFor(t, 5*time.Second, "the fakes joined the pool", func() bool {
		e.ns[0].table.mu.Lock()
		defer e.ns[0].table.mu.Unlock()
		return len(e.ns[0].table.members) == 1+3+len(fakes)
	})
	// ... and their claims are checked and refused, on every refresh.
	for round := int64(1); round <= 3; round++ {
		clustertest.WaitFor(t, 5*time.Second, "the fakes' claims refused again", func() bool {
			return e.ns[0].claimsRefused.Load() >= round*int64(len(fakes))
		})
		// The route never names a fake nor takes its topic table; it
		// names the real replicas (each observation checked; the whole
		// group polled for, as a loaded machine's gossip may drop a
		// member for a moment, and an election may move the master).
		// 15 s: under the race detector beside other packages' tests, a
		// replica's gossip was suspected and dropped for longer than 5 s
		// (CI, 2026-12-02).
		clustertest.WaitFor(t, 15*time.Second, "the real group's route", func() bool {
			r, err := route(nsc, "orders")
			if err != nil {
				return false
			}
			for _, rep := range r.Groups[0].Replicas {
				for _, addr := range fakes {
					if rep.GrpcAddress == addr {
						t.Fatalf("the route names the fake at %s", addr)
					}
				}
			}
			if r.Groups[0].WriteQueues != 4 || r.Groups[0].Term >= 1000 {
				t.Fatalf("route after the fakes joined: %v", r)
			}
			return masterIn(r) != 0 && len(r.Groups[0].Replicas) == 3
		})
		if _, err := route(nsc, "stolen"); err == nil {
			t.Fatal("the fake's topic table was taken")
		}
	}
}

func dialTLS(t *testing.T, addr string, sec *security) *grpc.ClientConn {
	t.Helper()
	cfg := sec.load(cluster.Identity{Cluster: "raftmq", Role: cluster.IdentityUser, ID: "test"}).ClientConfig(
		cluster.Want{Cluster: "raftmq", Role: cluster.IdentityBroker}, cluster.Want{Cluster: "raftmq", Role: cluster.IdentityNameServer})
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestEveryNameServerMethodHasAnAccessRule(t *testing.T) {
	if err := cluster.CheckAccessTable(&pb.NameServer_ServiceDesc, nameServerAccess); err != nil {
		t.Fatal(err)
	}
}

// A claim counts without a new check only when it claims no more than the
// confirmed one: a follower's changed term, or a master become follower;
// a new term as master, another address or another replica id is checked
// again.
func TestClaimsWithinTheConfirmedOneCountAtOnce(t *testing.T) {
	master := claimOf(cluster.MemberMeta{GRPCAddr: "a:1", Group: "g", ReplicaID: 1, Leader: true, Term: 3})
	follower := claimOf(cluster.MemberMeta{GRPCAddr: "a:1", Group: "g", ReplicaID: 1, Term: 3})
	for name, tc := range map[string]struct {
		meta      cluster.MemberMeta
		confirmed claim
		within    bool
	}{
		"the same":                 {cluster.MemberMeta{GRPCAddr: "a:1", Group: "g", ReplicaID: 1, Leader: true, Term: 3}, master, true},
		"a follower, a later term": {cluster.MemberMeta{GRPCAddr: "a:1", Group: "g", ReplicaID: 1, Term: 4}, follower, true},
		"a master become follower": {cluster.MemberMeta{GRPCAddr: "a:1", Group: "g", ReplicaID: 1, Term: 4}, master, true},
		"master at a later term":   {cluster.MemberMeta{GRPCAddr: "a:1", Group: "g", ReplicaID: 1, Leader: true, Term: 4}, master, false},
		"a follower become master": {cluster.MemberMeta{GRPCAddr: "a:1", Group: "g", ReplicaID: 1, Leader: true, Term: 3}, follower, false},
		"another address":          {cluster.MemberMeta{GRPCAddr: "b:1", Group: "g", ReplicaID: 1, Term: 3}, follower, false},
		"another replica":          {cluster.MemberMeta{GRPCAddr: "a:1", Group: "g", ReplicaID: 2, Term: 3}, follower, false},
	} {
		if got := claimOf(tc.meta).within(tc.confirmed); got != tc.within {
			t.Errorf("%s: within %v, want %v", name, got, tc.within)
		}
	}
}
