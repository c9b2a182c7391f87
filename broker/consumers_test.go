package broker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/cluster/pb"
)

// A member hears once that its group's members changed, by whichever
// answer comes first, and every change is announced to onChange: a join,
// a goodbye, an expiry.
func TestConsumerTableTellsEachMemberOfChangesOnce(t *testing.T) {
	var changes []string
	tab := newConsumerTable(time.Minute, func(g string) { changes = append(changes, g) })
	g := []*pb.ConsumerGroupInfo{{Group: "g"}}
	now := time.Unix(1000, 0)
	tab.heartbeat("a", g, now)
	if tab.changedFor("a", "g") || tab.noticeChange("a", "g") {
		t.Fatal("the first member told of a change it made itself")
	}
	if changed := tab.heartbeat("b", g, now); len(changed) != 0 {
		t.Fatalf("the joining member told %v", changed)
	}
	if !tab.changedFor("a", "g") || !tab.changedFor("a", "g") {
		t.Fatal("changedFor does not report the join, or told the member")
	}
	if !tab.noticeChange("a", "g") || tab.noticeChange("a", "g") {
		t.Fatal("the old member not told of the join exactly once")
	}
	if changed := tab.heartbeat("a", g, now); len(changed) != 0 {
		t.Fatalf("a heartbeat after the pull told it: %v again", changed)
	}
	tab.unregister("b", g)
	if changed := tab.heartbeat("a", g, now); !slices.Equal(changed, []string{"g"}) {
		t.Fatalf("the goodbye reached a's heartbeat as %v", changed)
	}
	tab.heartbeat("c", g, now)
	tab.members("g", now.Add(2*time.Minute)) // a and c expire
	if want := []string{"g", "g", "g", "g", "g"}; !slices.Equal(changes, want) {
		t.Fatalf("changes announced %v, want %v (a, b, b goodbye, c, expiry)", changes, want)
	}
	if tab.noticeChange("", "g") || tab.changedFor("", "g") {
		t.Fatal("a pull without a client id told of a change")
	}
}

// A change of a group's members answers that group's held pulls, and no
// other group's.
func TestHeldPullsOfAChangedGroupAreAnswered(t *testing.T) {
	h := newHoldService(Config{MaxHeldPulls: 10, MaxHeldPullsPerClient: 10}, nil, nil)
	mine := &heldPull{client: "c1", group: "g", key: queueKey{"t", 0}, deadline: time.Now().Add(time.Minute)}
	other := &heldPull{client: "c2", group: "h", key: queueKey{"t", 0}, deadline: time.Now().Add(time.Minute)}
	if !h.register(mine) || !h.register(other) {
		t.Fatal("not held")
	}
	h.wakeGroup("g")
	select {
	case <-mine.wake:
	default:
		t.Fatal("the changed group's pull still held")
	}
	select {
	case <-other.wake:
		t.Fatal("another group's pull answered")
	default:
	}
}

// dialReplica is a connection of its own to replica i, as a client's.
func dialReplica(t *testing.T, g *group, i int) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(g.cfgs[i].GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// heartbeatCG heartbeats (or unregisters) client in group cg over conn.
func heartbeatCG(t *testing.T, conn *grpc.ClientConn, client string, unregister bool) {
	t.Helper()
	info := []*pb.ConsumerGroupInfo{{Group: "cg", Subscriptions: []*pb.Subscription{{Topic: "t", Expression: "*"}}}}
	if _, err := pb.NewBrokerClient(conn).Heartbeat(context.Background(), &pb.HeartbeatRequest{ClientId: client, Groups: info, Unregister: unregister}); err != nil {
		t.Fatal(err)
	}
}

// consumerList is replica 0's member list of group cg.
func consumerList(t *testing.T, g *group) *pb.GetConsumerListResponse {
	t.Helper()
	l, err := g.client(0).GetConsumerList(context.Background(), &pb.GetConsumerListRequest{ConsumerGroup: "cg"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A consumer whose gRPC connection ends (its process killed) leaves its
// group at once, not when its heartbeats expire; the others stay. (That
// the end of a connection a member has left for another does not drop it
// is clientConns', TestRemotingClientsOfAClosedConnection.)
func TestAConsumerLeavesWhenItsConnectionEnds(t *testing.T) {
	g := newGroup(t, 1, func(c *Config) { c.ConsumerExpiry = time.Hour })
	members := func() string { return fmt.Sprint(consumerList(t, g).ClientIds) }
	killed, stays := dialReplica(t, g, 0), dialReplica(t, g, 0)
	defer stays.Close()
	heartbeatCG(t, killed, "killed", false)
	heartbeatCG(t, stays, "stays", false)
	if got := members(); got != "[killed stays]" {
		t.Fatalf("members %s", got)
	}
	killed.Close()
	waitFor(t, 5*time.Second, func() bool { return members() == "[stays]" })
}

// A member list says how long its replica has been hearing heartbeats:
// counted from the replica's start, so a restarted one says it is young.
func TestAMemberListSaysHowLongItsReplicaHasHeard(t *testing.T) {
	g := newGroup(t, 1, nil)
	heard := func() time.Duration { return time.Duration(consumerList(t, g).HeardForMs) * time.Millisecond }
	first := heard()
	waitFor(t, 5*time.Second, func() bool { return heard() >= first+50*time.Millisecond })
	up := heard()
	g.stop(0)
	g.start(0)
	if again := heard(); again >= up {
		t.Fatalf("a restarted replica has heard for %v, as long as before its restart (%v)", again, up)
	}
}

// A member seen leaving (its connection ended, or it unregistered) is
// named as departed until it heartbeats again.
func TestAMemberListNamesWhoLeft(t *testing.T) {
	g := newGroup(t, 1, func(c *Config) { c.ConsumerExpiry = time.Hour })
	departed := func() string { return fmt.Sprint(consumerList(t, g).DepartedIds) }
	killed, leaves := dialReplica(t, g, 0), dialReplica(t, g, 0)
	defer leaves.Close()
	heartbeatCG(t, killed, "killed", false)
	heartbeatCG(t, leaves, "leaves", false)
	if got := departed(); got != "[]" {
		t.Fatalf("departed %s before anyone left", got)
	}
	killed.Close()
	heartbeatCG(t, leaves, "leaves", true)
	waitFor(t, 5*time.Second, func() bool { return departed() == "[killed leaves]" })
	heartbeatCG(t, leaves, "leaves", false) // back
	if got := departed(); got != "[killed]" {
		t.Fatalf("departed %s after leaves came back", got)
	}
}

// A departure is named for an expiry, then forgotten: the table keeps no
// more than the members that could still be held on to.
func TestADepartureIsForgottenAfterAnExpiry(t *testing.T) {
	tab := newConsumerTable(time.Minute, nil)
	info := []*pb.ConsumerGroupInfo{{Group: "cg"}}
	now := time.Now()
	tab.heartbeat("c1", info, now)
	tab.unregister("c1", info)
	if got := fmt.Sprint(tab.departures("cg")); got != "[c1]" {
		t.Fatalf("departed %s right after c1 left", got)
	}
	tab.members("cg", now.Add(2*time.Minute))
	if got := fmt.Sprint(tab.departures("cg")); got != "[]" || len(tab.departed) != 0 {
		t.Fatalf("departed %s (%d groups kept) an expiry after c1 left", got, len(tab.departed))
	}
}
