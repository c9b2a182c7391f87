package cluster

import (
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(killChildEnv); spec != "" {
		runApplyChild(spec) // never returns
	}
	if spec := os.Getenv(killCommitlogChildEnv); spec != "" {
		runCommitlogApplyChild(spec) // never returns
	}
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestMemberMetaStaysUnderMemberlistLimit(t *testing.T) {
	biggest := MemberMeta{
		Role: RoleBroker, Cluster: strings.Repeat("c", maxMetaName), Group: strings.Repeat("g", maxMetaName),
		GRPCAddr: strings.Repeat("a", maxMetaAddr), ReplicaID: -1 << 31, Leader: true, Term: 1<<64 - 1, TopicsVersion: -1 << 63,
	}
	b, err := biggest.Encode()
	if err != nil || len(b) > MaxMetaSize {
		t.Fatalf("largest metadata: %d bytes, %v", len(b), err)
	}
	got, err := DecodeMemberMeta(b)
	if err != nil || got != biggest {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	over := biggest
	over.GRPCAddr += "x"
	if _, err := over.Encode(); err == nil {
		t.Fatal("an over-long address was encoded")
	}
	// Garbage never panics and never decodes into nonsense lengths.
	buf := make([]byte, 600)
	for i := 0; i < 20000; i++ {
		n := i % len(buf)
		rand.Read(buf[:n])
		DecodeMemberMeta(buf[:n])
		if n > 2 {
			for cut := 0; cut < n && cut < len(b); cut++ {
				DecodeMemberMeta(b[:cut])
			}
		}
	}
}

// collect reads a member's events in the background.
type collector struct {
	events chan MemberEvent
}

func collect(m *Membership) *collector {
	c := &collector{events: make(chan MemberEvent, 1000)}
	go func() {
		for e := range m.Events {
			c.events <- e
		}
	}()
	return c
}

// waitEvent waits for an event matching want.
func (c *collector) waitEvent(t *testing.T, want func(MemberEvent) bool) MemberEvent {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case e := <-c.events:
			if want(e) {
				return e
			}
		case <-deadline:
			t.Fatal("event not seen within 5 s")
		}
	}
}

func start(t *testing.T, name string, meta MemberMeta, join ...string) *Membership {
	t.Helper()
	m, err := StartMembership(MembershipConfig{Name: name, BindAddr: clustertest.FreeAddrs(t, 1)[0], Join: join, Meta: meta, Fast: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMembershipJoinUpdateLeave(t *testing.T) {
	ns := start(t, "ns-1", MemberMeta{Role: RoleNameServer, Cluster: "c", GRPCAddr: "127.0.0.1:9876"})
	defer ns.Close()
	events := collect(ns)
	seed := ns.ml.LocalNode().Address()
	b1 := start(t, "broker-a-1", MemberMeta{Role: RoleBroker, Cluster: "c", Group: "broker-a", ReplicaID: 1, GRPCAddr: "127.0.0.1:10911"}, seed)
	b2 := start(t, "broker-a-2", MemberMeta{Role: RoleBroker, Cluster: "c", Group: "broker-a", ReplicaID: 2, GRPCAddr: "127.0.0.1:10912"}, seed)
	defer b2.Close()
	e := events.waitEvent(t, func(e MemberEvent) bool { return e.Kind == MemberJoined && e.Name == "broker-a-1" })
	if e.Meta.Group != "broker-a" || e.Meta.ReplicaID != 1 || e.Meta.Role != RoleBroker {
		t.Fatalf("join event: %+v", e)
	}
	if err := b1.UpdateMeta(MemberMeta{Role: RoleBroker, Cluster: "c", Group: "broker-a", ReplicaID: 1, GRPCAddr: "127.0.0.1:10911", Leader: true, Term: 3, TopicsVersion: 7}); err != nil {
		t.Fatal(err)
	}
	e = events.waitEvent(t, func(e MemberEvent) bool { return e.Kind == MemberUpdated && e.Name == "broker-a-1" })
	if !e.Meta.Leader || e.Meta.Term != 3 || e.Meta.TopicsVersion != 7 {
		t.Fatalf("update event: %+v", e)
	}
	// Gossip converges: b2 comes to see all three.
	clustertest.WaitFor(t, 5*time.Second, "b2 seeing 3 members", func() bool { return len(b2.Members()) == 3 })
	b1.Close()
	events.waitEvent(t, func(e MemberEvent) bool { return e.Kind == MemberLeft && e.Name == "broker-a-1" })
}

// Garbage on the gossip port, UDP and TCP, does not bring a member down.
func TestGarbageOnGossipPort(t *testing.T) {
	m := start(t, "victim", MemberMeta{Role: RoleNameServer})
	defer m.Close()
	addr := m.ml.LocalNode().Address()
	junk := make([]byte, 2000)
	for i := 0; i < 50; i++ {
		rand.Read(junk)
		if u, err := net.Dial("udp", addr); err == nil {
			u.Write(junk[:1+i*37%len(junk)])
			u.Close()
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Write(junk[:1+i*53%len(junk)])
			c.Close()
		}
	}
	other := start(t, "other", MemberMeta{Role: RoleNameServer}, addr)
	defer other.Close()
	clustertest.WaitFor(t, 5*time.Second, "the member working after garbage", func() bool { return len(m.Members()) == 2 })
}

// With a gossip key, a member without it, or with another, cannot join:
// the route hijack through gossip starts with joining, and the keyed pool
// never sees the outsider or its claim.
func TestGossipKeyKeepsOutMembersWithoutIt(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	startKeyed := func(name string, key []byte, meta MemberMeta, join ...string) (*Membership, error) {
		return StartMembership(MembershipConfig{Name: name, BindAddr: clustertest.FreeAddrs(t, 1)[0], Join: join, Meta: meta,
			SecretKey: key, Fast: true, Logger: quiet})
	}
	ns, err := startKeyed("ns-1", key, MemberMeta{Role: RoleNameServer, Cluster: "c", GRPCAddr: "127.0.0.1:9876"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	seed := ns.ml.LocalNode().Address()
	claim := MemberMeta{Role: RoleBroker, Cluster: "c", Group: "broker-a", ReplicaID: 9, GRPCAddr: "127.0.0.1:1", Leader: true, Term: 1000}
	for name, k := range map[string][]byte{"no key": nil, "another key": []byte("fedcba9876543210fedcba9876543210")} {
		m, err := startKeyed("fake-"+strings.ReplaceAll(name, " ", "-"), k, claim, seed)
		if err != nil {
			t.Fatal(err)
		}
		if n := m.ml.NumMembers(); n != 1 {
			t.Errorf("%s: the outsider sees %d members", name, n)
		}
		m.Close()
	}
	member, err := startKeyed("broker-a-1", key, MemberMeta{Role: RoleBroker, Cluster: "c", Group: "broker-a", ReplicaID: 1, GRPCAddr: "127.0.0.1:10911"}, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	clustertest.WaitFor(t, 5*time.Second, "the keyed member joined", func() bool { return len(ns.Members()) == 2 })
	for _, m := range ns.Members() {
		if strings.HasPrefix(m.Name, "fake-") {
			t.Fatalf("the name server has the outsider %s as a member", m.Name)
		}
	}
}

// A member whose join fails (nobody there yet: a broker started before
// its name server) keeps trying, and joins once the other is up; it used
// to wait to be joined, which no name server does.
func TestAFailedJoinIsRetried(t *testing.T) {
	seed := clustertest.FreeAddrs(t, 1)[0]
	early := start(t, "broker-early", MemberMeta{Role: RoleBroker}, seed)
	defer early.Close()
	late, err := StartMembership(MembershipConfig{Name: "ns-late", BindAddr: seed, Meta: MemberMeta{Role: RoleNameServer}, Fast: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	clustertest.WaitFor(t, 10*time.Second, "the early member joined the late one", func() bool { return len(late.Members()) == 2 })
}
