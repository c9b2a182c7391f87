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

// halfProps are a half message's properties for producer group group.
func halfProps(group, key string) map[string]string {
	return map[string]string{message.PropertyTransactionPrepared: "true", message.PropertyProducerGroup: group,
		message.PropertyUniqKey: key, "app": "kept"}
}

// sendHalves sends one half per key to topic@0 of replica m, as records,
// and returns their ids by key.
func (g *group) sendHalves(m int, topic, pgroup string, keys ...string) map[string]string {
	g.t.Helper()
	var recs []byte
	for _, k := range keys {
		var err error
		if recs, err = message.Append(recs, &message.Message{Topic: topic, Tags: "tx", Keys: []string{k},
			Properties: halfProps(pgroup, k), Body: []byte(k)}); err != nil {
			g.t.Fatal(err)
		}
	}
	resp, err := g.client(m).SendMessage(context.Background(), &pb.SendMessageRequest{Topic: topic, Records: recs})
	if err != nil {
		g.t.Fatal(err)
	}
	ids := map[string]string{}
	for i, r := range resp.Results {
		ids[keys[i]] = r.MsgId
	}
	return ids
}

func (g *group) endTx(m int, topic, pgroup, id string, o pb.TransactionOutcome) (*pb.EndTransactionResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return g.client(m).EndTransaction(ctx, &pb.EndTransactionRequest{ProducerGroup: pgroup, MsgId: id, Topic: topic, Outcome: o})
}

func bodies(recs []message.Record) map[string]int {
	out := map[string]int{}
	for _, r := range recs {
		out[string(r.Body)]++
	}
	return out
}

// A half is invisible until committed; a commit stores it in its topic
// once, however often it is asked; a rollback stores nothing; an end that
// contradicts the first, or names the wrong group or topic, is refused
// with a reason.
func TestCommittedHalvesAreDeliveredAndRolledBackNever(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.TransactionTimeout = time.Hour })
	g.createTopic("tx", 1)
	m := g.master()
	ids := g.sendHalves(m, "tx", "pg", "commit", "rollback", "open")
	if got := g.pullRecords(m, "tx", 0); len(got) != 0 {
		t.Fatalf("%d messages in the topic before any commit", len(got))
	}
	resp, err := g.endTx(m, "tx", "pg", ids["commit"], pb.TransactionOutcome_TRANSACTION_COMMIT)
	if err != nil || resp.Committed == nil || resp.Outcome != pb.TransactionOutcome_TRANSACTION_COMMIT {
		t.Fatalf("commit: %v %v", resp, err)
	}
	if _, err := g.endTx(m, "tx", "pg", ids["rollback"], pb.TransactionOutcome_TRANSACTION_ROLLBACK); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	again, err := g.endTx(m, "tx", "pg", ids["commit"], pb.TransactionOutcome_TRANSACTION_COMMIT)
	if err != nil || again.Outcome != pb.TransactionOutcome_TRANSACTION_COMMIT {
		t.Fatalf("commit asked again: %v %v", again, err)
	}
	// A producer that lost the first answer learns where the message is.
	if again.Committed == nil || again.Committed.MsgId != resp.Committed.MsgId ||
		again.Committed.QueueOffset != resp.Committed.QueueOffset || again.Committed.CommitlogOffset != resp.Committed.CommitlogOffset {
		t.Fatalf("commit asked again answered with %v, the first with %v", again.Committed, resp.Committed)
	}
	for _, c := range []struct {
		name, group, topic, id string
		outcome                pb.TransactionOutcome
		code                   codes.Code
		reason                 pb.ErrorReason
	}{
		{"rollback after commit", "pg", "tx", ids["commit"], pb.TransactionOutcome_TRANSACTION_ROLLBACK, codes.FailedPrecondition, pb.ErrorReason_TRANSACTION_ENDED},
		{"commit after rollback", "pg", "tx", ids["rollback"], pb.TransactionOutcome_TRANSACTION_COMMIT, codes.FailedPrecondition, pb.ErrorReason_TRANSACTION_ENDED},
		{"another group's half", "other", "tx", ids["open"], pb.TransactionOutcome_TRANSACTION_COMMIT, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"another topic", "pg", "tx2", ids["open"], pb.TransactionOutcome_TRANSACTION_COMMIT, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"not a half", "pg", "tx", resp.Committed.MsgId, pb.TransactionOutcome_TRANSACTION_COMMIT, codes.NotFound, pb.ErrorReason_MESSAGE_NOT_FOUND},
		{"a bad id", "pg", "tx", "nonsense", pb.TransactionOutcome_TRANSACTION_COMMIT, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"a bad outcome", "pg", "tx", ids["open"], pb.TransactionOutcome(7), codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
	} {
		_, err := g.endTx(m, c.topic, c.group, c.id, c.outcome)
		if reason, _ := pb.ReasonOf(err); status.Code(err) != c.code || reason != c.reason {
			t.Errorf("%s: %v, want %v %v", c.name, err, c.code, c.reason)
		}
	}
	// A half without its producer group, and a send to the half topic, are refused.
	_, err = g.client(m).SendMessage(context.Background(), &pb.SendMessageRequest{Topic: "tx", Messages: []*pb.Message{
		{Body: []byte("x"), Properties: map[string]string{message.PropertyTransactionPrepared: "true"}}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a half without PGROUP: %v", err)
	}
	_, err = g.client(m).SendMessage(context.Background(), &pb.SendMessageRequest{Topic: message.TransHalfTopic, Messages: []*pb.Message{{Body: []byte("x")}}})
	if reason, _ := pb.ReasonOf(err); reason != pb.ErrorReason_ILLEGAL_NAME {
		t.Errorf("a send to the half topic: %v", err)
	}
	// A slave refuses an end, naming the master.
	if _, err := g.endTx((m+1)%3, "tx", "pg", ids["open"], pb.TransactionOutcome_TRANSACTION_COMMIT); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("an end on a slave: %v", err)
	}
	got := g.pullRecords(m, "tx", 0)
	if b := bodies(got); len(got) != 1 || b["commit"] != 1 {
		t.Fatalf("topic holds %v, want the committed message once", b)
	}
	r := got[0]
	if r.Tags != "tx" || r.Properties["app"] != "kept" || r.Properties[message.PropertyUniqKey] != "commit" ||
		r.Properties[message.PropertyTransactionPrepared] != "" || r.Properties[message.PropertyRealTopic] != "" || r.Topic != "tx" {
		t.Errorf("committed as %+v", r)
	}
	if id := message.FormatID("broker-a", r.Offset); id != resp.Committed.MsgId {
		t.Errorf("commit answered %s, stored as %s", resp.Committed.MsgId, id)
	}
	g.checkIdentical(nil) // the slaves hold what the master holds
}

// checkStream opens a check-back stream to replica m as producer group
// pgroup for topics.
func (g *group) checkStream(ctx context.Context, m int, pgroup string, topics ...string) pb.Broker_CheckTransactionsClient {
	g.t.Helper()
	s, err := g.client(m).CheckTransactions(ctx)
	if err != nil {
		g.t.Fatal(err)
	}
	if err := s.Send(&pb.TransactionCheckStreamRequest{ProducerGroup: pgroup, ClientId: "test", Topics: topics}); err != nil {
		g.t.Fatal(err)
	}
	return s
}

// A half left open is checked back, on a stream of its producer group that
// names its topic, with the half's message; a commit answered on the
// stream stores it. One answered "unknown" is checked again each interval
// and rolled back after the last check, with a copy for operators.
func TestOpenHalvesAreCheckedBackThenRolledBack(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) {
		c.TransactionTimeout = 200 * time.Millisecond
		c.TransactionCheckInterval = 100 * time.Millisecond
		c.TransactionCheckMax = 3
	})
	g.createTopic("tx", 1)
	m := g.master()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	other := g.checkStream(ctx, m, "pg", "elsewhere") // not its topic: never asked
	otherChecks := make(chan *pb.TransactionCheck, 16)
	go func() {
		for {
			c, err := other.Recv()
			if err != nil {
				return
			}
			otherChecks <- c
		}
	}()
	s := g.checkStream(ctx, m, "pg", "tx")
	ids := g.sendHalves(m, "tx", "pg", "yes", "maybe")
	checks := map[string][]int32{}
	for len(checks["maybe"]) < 3 {
		c, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		k := string(c.Message.Body)
		if c.MsgId != ids[k] || c.Message.Topic != "tx" || c.Message.Properties["app"] != "kept" {
			t.Fatalf("check %+v for half %s", c, ids[k])
		}
		checks[k] = append(checks[k], c.CheckTimes)
		if k == "yes" {
			if err := s.Send(&pb.TransactionCheckStreamRequest{Answer: &pb.EndTransactionRequest{ProducerGroup: "pg", MsgId: c.MsgId,
				Topic: "tx", Outcome: pb.TransactionOutcome_TRANSACTION_COMMIT}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if fmt.Sprint(checks["maybe"]) != "[1 2 3]" || len(checks["yes"]) < 1 || checks["yes"][0] != 1 {
		t.Fatalf("checks by half: %v", checks)
	}
	var maxed []message.Record
	waitFor(t, 10*time.Second, func() bool {
		maxed = g.pullRecords(m, message.TransCheckMaxTopic, 0)
		return len(maxed) > 0
	})
	if len(maxed) != 1 || string(maxed[0].Body) != "maybe" || maxed[0].Properties[message.PropertyTransactionCheckTimes] != "3" ||
		maxed[0].Properties[message.PropertyOriginMsgID] != ids["maybe"] {
		t.Fatalf("check-max topic holds %+v", maxed)
	}
	if b := bodies(g.pullRecords(m, "tx", 0)); len(b) != 1 || b["yes"] != 1 {
		t.Fatalf("topic holds %v, want the half answered commit once", b)
	}
	if _, err := g.endTx(m, "tx", "pg", ids["maybe"], pb.TransactionOutcome_TRANSACTION_COMMIT); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a commit after the check-max rollback: %v", err)
	}
	select {
	case c := <-otherChecks:
		t.Fatalf("a stream for another topic was asked about %s", c.MsgId)
	default:
	}
	// Every half ended: the cursor is past them all, on every replica.
	waitFor(t, 5*time.Second, func() bool {
		for i := range 3 {
			if g.brokers[i].meta.halves.position() != 2 {
				return false
			}
		}
		return true
	})
	g.checkIdentical(nil)
}

// A new master knows what the old one recorded: ended halves stay ended,
// and check counts go on from where they were.
func TestTransactionStateSurvivesAMasterChange(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.TransactionTimeout = time.Hour })
	g.createTopic("tx", 1)
	m := g.master()
	ids := g.sendHalves(m, "tx", "pg", "a", "b")
	if _, err := g.endTx(m, "tx", "pg", ids["a"], pb.TransactionOutcome_TRANSACTION_COMMIT); err != nil {
		t.Fatal(err)
	}
	g.stop(m)
	var n int
	waitFor(t, 10*time.Second, func() bool { n = g.master(); return n >= 0 && n != m })
	if _, err := g.endTx(n, "tx", "pg", ids["a"], pb.TransactionOutcome_TRANSACTION_ROLLBACK); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("rollback of a committed half on the new master: %v", err)
	}
	if resp, err := g.endTx(n, "tx", "pg", ids["b"], pb.TransactionOutcome_TRANSACTION_ROLLBACK); err != nil || resp.Outcome != pb.TransactionOutcome_TRANSACTION_ROLLBACK {
		t.Fatalf("rollback on the new master: %v %v", resp, err)
	}
	if b := bodies(g.pullRecords(n, "tx", 0)); len(b) != 1 || b["a"] != 1 {
		t.Fatalf("topic holds %v", b)
	}
}

// The half table applies an end only to an open half, moves its cursor
// over ended halves, keeps the last keepEnded outcomes below it, and comes
// back the same from its snapshot.
func TestHalfTableAppliesEndsOnce(t *testing.T) {
	tb := newHalfTable()
	commit, rollback, unknown := pb.TransactionOutcome_TRANSACTION_COMMIT, pb.TransactionOutcome_TRANSACTION_ROLLBACK, pb.TransactionOutcome_TRANSACTION_UNKNOWN
	got := tb.apply(&pb.TransactionUpdate{StoreTimestamp: 5, Ends: []*pb.TransactionEnd{
		{HalfOffset: 1, Outcome: commit}, {HalfOffset: 2, CheckTimes: 1}, {HalfOffset: 1, Outcome: rollback}}})
	if fmt.Sprint(got) != "[true true false]" {
		t.Fatalf("applied %v", got)
	}
	if c, open := tb.position(), tb.open(3); c != 0 || open != 2 {
		t.Fatalf("cursor %d, %d of 3 open", c, open)
	}
	if st, ok := tb.state(2); !ok || st.CheckTimes != 1 || st.CheckedAt != 5 || st.Outcome != unknown {
		t.Fatalf("half 2: %+v %v", st, ok)
	}
	tb.apply(&pb.TransactionUpdate{Ends: []*pb.TransactionEnd{{HalfOffset: 0, Outcome: rollback}, {HalfOffset: 2, Outcome: commit}}})
	if c, open := tb.position(), tb.open(4); c != 3 || open != 1 {
		t.Fatalf("cursor %d, %d of 4 open, want 3, 1", c, open)
	}
	if st, ok := tb.state(1); !ok || st.Outcome != commit {
		t.Fatalf("half 1 below the cursor: %+v %v", st, ok)
	}
	var snap = tb.snapshot()
	restored := newHalfTable()
	restored.restore(snap)
	if fmt.Sprint(restored.snapshot()) != fmt.Sprint(snap) {
		t.Fatalf("restored %v, want %v", restored.snapshot(), snap)
	}
	// Retention: everything below 10 counts as ended; outcomes far below the cursor are forgotten.
	tb.apply(&pb.TransactionUpdate{ExpireBelow: 10 + keepEnded})
	if c := tb.position(); c != 10+keepEnded {
		t.Fatalf("cursor %d after expiry", c)
	}
	if _, ok := tb.state(1); ok {
		t.Fatal("half 1's outcome kept past keepEnded")
	}
	if got := tb.apply(&pb.TransactionUpdate{Ends: []*pb.TransactionEnd{{HalfOffset: 5, Outcome: commit}}}); got[0] {
		t.Fatal("an end below the cursor applied")
	}
	restored.restore(nil)
	if c, open := restored.position(), restored.open(2); c != 0 || open != 2 {
		t.Fatalf("restored from no state: cursor %d, %d of 2 open", c, open)
	}
}

// A check-back stream that does not say who it is, or names what no
// producer could send to, is refused with a reason; one opened on a slave
// is sent to the master.
func TestBadCheckBackStreamsAreRefused(t *testing.T) {
	g := newGroup(t, 3, nil)
	m := g.master()
	for _, c := range []struct {
		name   string
		at     int
		hello  *pb.TransactionCheckStreamRequest
		code   codes.Code
		reason pb.ErrorReason
	}{
		{"no group", m, &pb.TransactionCheckStreamRequest{Topics: []string{"t"}}, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_NAME},
		{"a bad group", m, &pb.TransactionCheckStreamRequest{ProducerGroup: "a/b", Topics: []string{"t"}}, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_NAME},
		{"no topic", m, &pb.TransactionCheckStreamRequest{ProducerGroup: "pg"}, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"a bad topic", m, &pb.TransactionCheckStreamRequest{ProducerGroup: "pg", Topics: []string{"t", "../x"}}, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_NAME},
		{"too many topics", m, &pb.TransactionCheckStreamRequest{ProducerGroup: "pg", Topics: make([]string, maxCheckTopics+1)}, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT},
		{"a slave", (m + 1) % 3, &pb.TransactionCheckStreamRequest{ProducerGroup: "pg", Topics: []string{"t"}}, codes.FailedPrecondition, pb.ErrorReason_NOT_LEADER},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := g.client(c.at).CheckTransactions(ctx)
		if err == nil {
			err = s.Send(c.hello)
		}
		if err == nil {
			_, err = s.Recv()
		}
		cancel()
		if reason, _ := pb.ReasonOf(err); status.Code(err) != c.code || reason != c.reason {
			t.Errorf("%s: %v, want %v %v", c.name, err, c.code, c.reason)
		}
	}
}
