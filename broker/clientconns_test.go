package broker

import (
	"testing"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/remoting"
)

type pushRecorder struct{ groups []string }

func (p *pushRecorder) Push(c *remoting.Command) {
	p.groups = append(p.groups, c.ExtFields["consumerGroup"])
}

func groupInfos(names ...string) []*pb.ConsumerGroupInfo {
	var out []*pb.ConsumerGroupInfo
	for _, n := range names {
		out = append(out, &pb.ConsumerGroupInfo{Group: n})
	}
	return out
}

// A group's change is pushed once to each connection with a member of
// it, and to no other.
func TestRemotingClientsNotifyTheGroupsConnections(t *testing.T) {
	tab := newClientConns()
	a, b, other := &pushRecorder{}, &pushRecorder{}, &pushRecorder{}
	tab.heartbeat(a, "c1", groupInfos("g"), nil, remotingCaller{})
	tab.heartbeat(a, "c2", groupInfos("g", "h"), nil, remotingCaller{})
	tab.heartbeat(b, "c3", groupInfos("g"), nil, remotingCaller{})
	tab.heartbeat(other, "c4", groupInfos("h"), nil, remotingCaller{})
	tab.notify("g")
	if len(a.groups) != 1 || len(b.groups) != 1 || len(other.groups) != 0 || a.groups[0] != "g" {
		t.Fatalf("pushes a %v b %v other %v", a.groups, b.groups, other.groups)
	}
	// A later heartbeat replaces the client's groups.
	tab.heartbeat(b, "c3", groupInfos("h"), nil, remotingCaller{})
	tab.notify("g")
	if len(b.groups) != 1 {
		t.Fatalf("c3 left g but was told of it: %v", b.groups)
	}
}

// A closed connection's clients are returned with their groups, and only
// those; a client that moved to another connection since stays.
func TestRemotingClientsOfAClosedConnection(t *testing.T) {
	tab := newClientConns()
	old, fresh := &pushRecorder{}, &pushRecorder{}
	tab.heartbeat(old, "moved", groupInfos("g"), nil, remotingCaller{})
	tab.heartbeat(old, "stays", groupInfos("g", "h"), nil, remotingCaller{})
	tab.heartbeat(fresh, "moved", groupInfos("g"), nil, remotingCaller{})
	gone := tab.closed(old)
	if len(gone) != 1 || len(gone["stays"]) != 2 {
		t.Fatalf("gone %v, want only stays with its 2 groups", gone)
	}
	tab.notify("g")
	if len(fresh.groups) != 1 || len(old.groups) != 0 {
		t.Fatalf("after the close, pushes fresh %v old %v", fresh.groups, old.groups)
	}
	if gone := tab.closed(old); len(gone) != 0 {
		t.Fatalf("closed twice: %v", gone)
	}
}

// One connection heartbeats for at most maxClientsPerConn client ids.
func TestRemotingClientsPerConnectionCap(t *testing.T) {
	tab := newClientConns()
	conn := &pushRecorder{}
	for i := 0; i < maxClientsPerConn; i++ {
		if !tab.heartbeat(conn, string(rune('a'+i%26))+string(rune('0'+i/26)), groupInfos("g"), nil, remotingCaller{}) {
			t.Fatalf("client %d refused under the cap", i)
		}
	}
	if tab.heartbeat(conn, "one-more", groupInfos("g"), nil, remotingCaller{}) {
		t.Fatal("a client over the cap accepted")
	}
	if !tab.heartbeat(conn, "a0", groupInfos("g"), nil, remotingCaller{}) {
		t.Fatal("a known client's next heartbeat refused at the cap")
	}
	if !tab.heartbeat(&pushRecorder{}, "one-more", groupInfos("g"), nil, remotingCaller{}) {
		t.Fatal("the cap is per connection")
	}
}

// checkRecorder counts the pushes a connection got.
type checkRecorder struct{ pushes int }

func (p *checkRecorder) Push(*remoting.Command) { p.pushes++ }

// A check-back goes to a connection of a producer of the half's group
// whose caller may end it, in turn; with none, nothing is pushed.
func TestRemotingProducersTakeChecksInTurn(t *testing.T) {
	tab := newClientConns()
	a, b, denied, consumer := &checkRecorder{}, &checkRecorder{}, &checkRecorder{}, &checkRecorder{}
	tab.heartbeat(a, "p1", nil, []string{"pg"}, remotingCaller{known: true})
	tab.heartbeat(b, "p2", nil, []string{"pg", "other"}, remotingCaller{known: true})
	tab.heartbeat(denied, "p3", nil, []string{"pg"}, remotingCaller{})
	tab.heartbeat(consumer, "c1", groupInfos("pg"), nil, remotingCaller{known: true})
	allowed := func(c remotingCaller) bool { return c.known }
	for range 4 {
		if !tab.pushToProducer("pg", allowed, &remoting.Command{Code: remoting.CodeCheckTransactionState}) {
			t.Fatal("no producer took a check")
		}
	}
	if a.pushes != 2 || b.pushes != 2 || denied.pushes != 0 || consumer.pushes != 0 {
		t.Fatalf("pushes: %d %d, denied %d, consumer %d", a.pushes, b.pushes, denied.pushes, consumer.pushes)
	}
	if tab.pushToProducer("nobody", allowed, &remoting.Command{}) {
		t.Fatal("a check pushed for a group with no producer")
	}
	tab.closed(a)
	tab.closed(b)
	if tab.pushToProducer("pg", allowed, &remoting.Command{}) {
		t.Fatal("a check pushed on a closed connection")
	}
}
