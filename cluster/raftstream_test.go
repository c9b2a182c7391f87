package cluster

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// tlsGroup is a test group whose members speak Raft over mutual TLS, with
// certificates from ca naming replicas of group "broker-a" in cluster "c1".
func tlsGroup(t *testing.T, ca *testCA) *testGroup {
	return newTestGroup(t, 3, 50*time.Millisecond, func(c *RaftConfig) {
		c.Cluster, c.Group = "c1", "broker-a"
		c.TLS = ca.load(replica("c1", "broker-a", c.ID))
	})
}

func TestRaftOverMutualTLSReplicatesAndRestarts(t *testing.T) {
	g := tlsGroup(t, newTestCA(t, "c1"))
	committed := g.apply(g.leader(), "tls", 20)
	g.converge(committed)
	l := g.leader()
	g.stop(l)
	committed = append(committed, g.apply(g.leader(), "after", 10)...)
	g.start(l)
	g.converge(committed)
}

// outsiderStream is a Raft stream layer for an attacker: it dials with
// tlsConfig (nil: plain TCP) and accepts nothing worth having.
type outsiderStream struct {
	net.Listener
	tlsConfig *tls.Config
}

func (s outsiderStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.tlsConfig == nil {
		return d.Dial("tcp", string(addr))
	}
	return tls.DialWithDialer(d, "tcp", string(addr), s.tlsConfig)
}

func outsider(t *testing.T, tlsConfig *tls.Config) *raft.NetworkTransport {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := raft.NewNetworkTransport(outsiderStream{lis, tlsConfig}, 1, 2*time.Second, io.Discard)
	t.Cleanup(func() { tr.Close() })
	return tr
}

// An outsider on the host sends what deposed the master and made a
// follower obey a fake leader on a plain transport: a RequestVote with the
// leadership-transfer flag and an AppendEntries heartbeat at a far higher
// term. Against a group on mutual TLS every attempt fails, whether it
// comes without TLS, without a certificate, or with a valid certificate of
// another group or of a user; no member's term or leader changes.
func TestRaftRefusesForgedRPCsFromOutsiders(t *testing.T) {
	ca := newTestCA(t, "c1")
	g := tlsGroup(t, ca)
	committed := g.apply(g.leader(), "before", 5)
	g.converge(committed)
	l := g.leader()
	leaderAddr := g.cfgs[l].BindAddr
	terms := func() []string {
		var out []string
		for _, n := range g.nodes {
			out = append(out, n.Raft.Stats()["term"])
		}
		return out
	}
	before := terms()
	term, _ := strconv.ParseUint(before[l], 10, 64)

	configs := map[string]*tls.Config{
		"plain TCP":       nil,
		"no certificate":  {InsecureSkipVerify: true, MinVersion: tls.VersionTLS13},
		"another group":   clientSkippingServerCheck(ca.load(replica("c1", "broker-b", "1")).ClientConfig()),
		"a user":          clientSkippingServerCheck(ca.load(Identity{Cluster: "c1", Role: IdentityUser, ID: "mallory"}).ClientConfig()),
		"another cluster": clientSkippingServerCheck(ca.load(replica("c2", "broker-a", "9")).ClientConfig()),
	}
	for name, config := range configs {
		tr := outsider(t, config)
		for i, n := range g.cfgs {
			header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("9"), Addr: []byte(tr.LocalAddr())}
			var vr raft.RequestVoteResponse
			err := tr.RequestVote(raft.ServerID(n.ID), raft.ServerAddress(n.BindAddr), &raft.RequestVoteRequest{
				RPCHeader: header, Term: term + 1000, LastLogIndex: 1 << 40, LastLogTerm: term + 1000, LeadershipTransfer: true,
			}, &vr)
			if err == nil {
				t.Errorf("%s: a forged RequestVote reached member %d (granted %v)", name, i+1, vr.Granted)
			}
			var ar raft.AppendEntriesResponse
			err = tr.AppendEntries(raft.ServerID(n.ID), raft.ServerAddress(n.BindAddr), &raft.AppendEntriesRequest{
				RPCHeader: header, Term: term + 1000, PrevLogEntry: 0, PrevLogTerm: 0, LeaderCommitIndex: 0,
			}, &ar)
			if err == nil {
				t.Errorf("%s: a forged AppendEntries reached member %d (success %v)", name, i+1, ar.Success)
			}
			// The same with an entry, on a member stream (appendstream.go).
			if err := forgedMemberStream(config, n.BindAddr, &raft.AppendEntriesRequest{
				RPCHeader: header, Term: term + 1000, PrevLogEntry: 1 << 40, PrevLogTerm: term + 1000, LeaderCommitIndex: 1 << 40,
				Entries: []*raft.Log{{Index: 1<<40 + 1, Term: term + 1000, Type: raft.LogCommand, Data: []byte("forged")}},
			}); err == nil {
				t.Errorf("%s: a forged AppendEntries on a member stream reached member %d", name, i+1)
			}
		}
	}
	// Raft answers an RPC after acting on it, so a forged one that got
	// through would show in the state by now.
	if after := terms(); !equalStrings(after, before) {
		t.Fatalf("terms went from %v to %v", before, after)
	}
	if now := g.leader(); now != l || g.cfgs[now].BindAddr != leaderAddr {
		t.Fatalf("the leader changed from member %d to %d", l+1, now+1)
	}
	g.converge(append(committed, g.apply(l, "after", 5)...))
}

// forgedMemberStream sends req to addr on a member stream, dialed with
// config (nil: plain TCP), and returns the error of its answer.
func forgedMemberStream(config *tls.Config, addr string, req *raft.AppendEntriesRequest) error {
	conn, err := outsiderStream{tlsConfig: config}.Dial(raft.ServerAddress(addr), 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	c := &memberConn{conn: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn)}
	c.w.Write([]byte{memberStreamByte, memberStreamVersion})
	var resp raft.AppendEntriesResponse
	return c.call(req, &resp)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
