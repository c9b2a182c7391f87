package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

type pullOutcome struct {
	resp    *pb.PullMessageResponse
	err     error
	elapsed time.Duration
}

// pullAsync starts a pull on replica i and returns where its outcome comes.
func (g *group) pullAsync(ctx context.Context, i int, req *pb.PullMessageRequest) <-chan pullOutcome {
	out := make(chan pullOutcome, 1)
	go func() {
		start := time.Now()
		resp, err := g.client(i).PullMessage(ctx, req)
		out <- pullOutcome{resp, err, time.Since(start)}
	}()
	return out
}

func decodeAll(t *testing.T, recs [][]byte) []message.Record {
	t.Helper()
	var out []message.Record
	for _, raw := range recs {
		r, err := message.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// A pull held on the master is answered by the arrival of a message, long
// before the periodic check (30 s here) could have answered it.
func TestHeldPullAnsweredOnArrival(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("lp", 2)
	m := g.master()
	for round := 0; round < 5; round++ {
		pull := g.pullAsync(context.Background(), m, &pb.PullMessageRequest{
			ConsumerGroup: "cg", Topic: "lp", QueueId: 1, QueueOffset: int64(round), SuspendTimeoutMs: 20_000,
		})
		waitFor(t, 5*time.Second, func() bool { return g.brokers[m].holds.size() == 1 })
		body := fmt.Sprintf("arrival-%d", round)
		sent := time.Now()
		if _, err := g.client(m).SendMessage(context.Background(), oneMessage("lp", 1, body)); err != nil {
			t.Fatal(err)
		}
		o := <-pull
		if o.err != nil {
			t.Fatal(o.err)
		}
		recs := decodeAll(t, o.resp.Records)
		if o.resp.Status != pb.PullStatus_PULL_FOUND || len(recs) != 1 || string(recs[0].Body) != body || o.resp.NextBeginOffset != int64(round+1) {
			t.Fatalf("held pull answered %v with %d records, next %d", o.resp.Status, len(recs), o.resp.NextBeginOffset)
		}
		if waited := time.Since(sent); waited >= g.cfgs[m].HoldCheckInterval {
			t.Fatalf("answered %v after the send: the periodic check, not the arrival", waited)
		}
		if g.brokers[m].holds.size() != 0 {
			t.Fatal("answered pull still held")
		}
	}
}

// A held pull whose subscription the arrival does not match stays held;
// one that matches is answered.
func TestHeldPullWokenOnlyByMatchingTags(t *testing.T) {
	g := newGroup(t, 1, nil)
	g.createTopic("tags", 1)
	pull := g.pullAsync(context.Background(), 0, &pb.PullMessageRequest{
		ConsumerGroup: "cg", Topic: "tags", QueueId: 0, SuspendTimeoutMs: 20_000, Subscription: "B || C",
	})
	waitFor(t, 5*time.Second, func() bool { return g.brokers[0].holds.size() == 1 })
	send := func(tag, body string) {
		req := &pb.SendMessageRequest{Topic: "tags", Messages: []*pb.Message{{Tags: tag, Body: []byte(body)}}}
		if _, err := g.client(0).SendMessage(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	send("A", "a")
	select {
	case o := <-pull:
		t.Fatalf("a pull for B || C answered on an A: %+v %v", o.resp, o.err)
	default:
	}
	if g.brokers[0].holds.size() != 1 {
		t.Fatal("pull no longer held after a non-matching arrival")
	}
	send("C", "c")
	o := <-pull
	if o.err != nil {
		t.Fatal(o.err)
	}
	recs := decodeAll(t, o.resp.Records)
	if o.resp.Status != pb.PullStatus_PULL_FOUND || len(recs) != 1 || recs[0].Tags != "C" || o.resp.NextBeginOffset != 2 {
		t.Fatalf("got %v %d records next %d", o.resp.Status, len(recs), o.resp.NextBeginOffset)
	}
}

// A slave never holds: with nothing new it answers at once and suggests
// the master; and an arrival there wakes nothing.
func TestSlaveDoesNotHoldAndSendsConsumerToMaster(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("sl", 1)
	m := g.master()
	slave := (m + 1) % 3
	o := <-g.pullAsync(context.Background(), slave, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "sl", SuspendTimeoutMs: 20_000})
	if o.err != nil || o.resp.Status != pb.PullStatus_PULL_NO_NEW_MESSAGE || o.resp.SuggestReplicaId != int32(m+1) || o.resp.ReplicaId != int32(slave+1) {
		t.Fatalf("slave pull: %+v %v", o.resp, o.err)
	}
	if o.elapsed > 10*time.Second {
		t.Fatalf("slave held the pull %v", o.elapsed)
	}
	if n := g.brokers[slave].holds.size(); n != 0 {
		t.Fatalf("slave holds %d pulls", n)
	}
	// Messages arrive: the slave serves them when asked.
	if _, err := g.client(m).SendMessage(context.Background(), oneMessage("sl", 0, "x")); err != nil {
		t.Fatal(err)
	}
	// (Polled: the slave applies the entry a moment after the master
	// answers the send; under a loaded go test ./... that moment can
	// outlast quiesce's view of applied indexes.)
	waitFor(t, 10*time.Second, func() bool {
		o = <-g.pullAsync(context.Background(), slave, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "sl"})
		if o.err != nil || o.resp.Status == pb.PullStatus_PULL_FOUND && len(o.resp.Records) != 1 {
			t.Fatalf("slave read: %+v %v", o.resp, o.err)
		}
		return o.resp.Status == pb.PullStatus_PULL_FOUND
	})
}

// laggingGroup is a group of 3 that suggests a slave to a consumer more
// than 10 messages behind, with 50 messages on topic's one queue; and its
// master.
func laggingGroup(t *testing.T, topic string) (*group, int) {
	t.Helper()
	g := newGroup(t, 3, func(c *Config) { c.SlaveReadLag = 10 })
	g.createTopic(topic, 1)
	m := g.master()
	req := &pb.SendMessageRequest{Topic: topic}
	for i := 0; i < 50; i++ {
		req.Messages = append(req.Messages, &pb.Message{Body: []byte(fmt.Sprint(i))})
	}
	if _, err := g.client(m).SendMessage(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return g, m
}

// The master suggests a slave to a consumer far behind.
func TestMasterSuggestsSlaveToLaggingConsumer(t *testing.T) {
	g, m := laggingGroup(t, "lag")
	o := <-g.pullAsync(context.Background(), m, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "lag", MaxMessages: 4})
	if o.err != nil || o.resp.Status != pb.PullStatus_PULL_FOUND || o.resp.SuggestReplicaId == 0 || o.resp.SuggestReplicaId == int32(m+1) {
		t.Fatalf("lagging pull on master: %+v %v", o.resp, o.err)
	}
	// Near the end the master makes no suggestion.
	o = <-g.pullAsync(context.Background(), m, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "lag", QueueOffset: 45})
	if o.err != nil || o.resp.SuggestReplicaId != 0 {
		t.Fatalf("caught-up pull on master: %+v %v", o.resp, o.err)
	}
}

// A held pull times out with no new message; one whose client goes away is
// dropped; a master that loses leadership answers its held pulls; past the
// cap, pulls are answered at once.
func TestHeldPullEndings(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.MaxHeldPulls = 2 })
	g.createTopic("end", 1)
	m := g.master()
	req := func(ms int64) *pb.PullMessageRequest {
		return &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "end", SuspendTimeoutMs: ms}
	}
	o := <-g.pullAsync(context.Background(), m, req(100))
	if o.err != nil || o.resp.Status != pb.PullStatus_PULL_NO_NEW_MESSAGE || o.elapsed < 100*time.Millisecond {
		t.Fatalf("timed-out pull: %+v %v after %v", o.resp, o.err, o.elapsed)
	}

	ctx, cancel := context.WithCancel(context.Background())
	gone := g.pullAsync(ctx, m, req(20_000))
	waitFor(t, 5*time.Second, func() bool { return g.brokers[m].holds.size() == 1 })
	cancel()
	if o := <-gone; status.Code(o.err) != codes.Canceled {
		t.Fatalf("cancelled pull: %v", o.err)
	}
	waitFor(t, 5*time.Second, func() bool { return g.brokers[m].holds.size() == 0 })

	held1 := g.pullAsync(context.Background(), m, req(20_000))
	held2 := g.pullAsync(context.Background(), m, req(20_000))
	waitFor(t, 5*time.Second, func() bool { return g.brokers[m].holds.size() == 2 })
	o = <-g.pullAsync(context.Background(), m, req(20_000))
	// Answered, not held: well within its 20 s suspend, and the holds
	// still the two.
	if o.err != nil || o.resp.Status != pb.PullStatus_PULL_NO_NEW_MESSAGE || o.elapsed > 10*time.Second {
		t.Fatalf("pull over the cap: %+v %v after %v", o.resp, o.err, o.elapsed)
	}
	if n := g.brokers[m].holds.size(); n != 2 {
		t.Fatalf("%d pulls held after one over the cap of 2", n)
	}

	if err := g.brokers[m].TransferLeadership(); err != nil {
		t.Fatal(err)
	}
	for _, held := range []<-chan pullOutcome{held1, held2} {
		o := <-held
		if o.err != nil || o.resp.Status != pb.PullStatus_PULL_NO_NEW_MESSAGE || o.elapsed > 10*time.Second {
			t.Fatalf("held pull after leadership loss: %+v %v after %v", o.resp, o.err, o.elapsed)
		}
	}
	if nm := g.master(); nm == m {
		t.Fatal("leadership did not move")
	}
}

// A slave behind the offset a consumer asks for (it has not applied it
// yet) answers no new message at that offset and sends it to the master.
func TestSlaveBehindDoesNotMoveConsumerBack(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("behind", 1)
	m := g.master()
	slave := (m + 1) % 3
	o := <-g.pullAsync(context.Background(), slave, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "behind", QueueOffset: 5})
	if o.err != nil || o.resp.Status != pb.PullStatus_PULL_NO_NEW_MESSAGE || o.resp.NextBeginOffset != 5 || o.resp.SuggestReplicaId != int32(m+1) {
		t.Fatalf("pull past a slave's end: %+v %v", o.resp, o.err)
	}
	o = <-g.pullAsync(context.Background(), m, &pb.PullMessageRequest{ConsumerGroup: "cg", Topic: "behind", QueueOffset: 5})
	if o.err != nil || o.resp.Status != pb.PullStatus_PULL_OFFSET_ILLEGAL || o.resp.NextBeginOffset != 0 {
		t.Fatalf("pull past the master's end: %+v %v", o.resp, o.err)
	}
}
