package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// initProducer asks replica i for a producer id on topic.
func (g *group) initProducer(i int, topic string, id int64) *pb.InitProducerResponse {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := g.client(i).InitProducer(ctx, &pb.InitProducerRequest{Topic: topic, ProducerId: id})
	if err != nil {
		g.t.Fatal(err)
	}
	return resp
}

// keyless is records like records', without a unique key.
func keyless(t testing.TB, topic string, queue int32, bodies ...string) []byte {
	t.Helper()
	var out []byte
	for _, body := range bodies {
		var err error
		if out, err = message.Append(out, &message.Message{Topic: topic, QueueID: queue, Body: []byte(body), BornTime: 1700000000000}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func sameResults(t *testing.T, what string, got, want *pb.SendMessageResponse) {
	t.Helper()
	if len(got.Results) != len(want.Results) {
		t.Fatalf("%s: %d results, want %d", what, len(got.Results), len(want.Results))
	}
	for i := range want.Results {
		if g, w := got.Results[i], want.Results[i]; g.MsgId != w.MsgId || g.QueueOffset != w.QueueOffset || g.CommitlogOffset != w.CommitlogOffset {
			t.Fatalf("%s: message %d answered %v, stored as %v", what, i, g, w)
		}
	}
}

// An idempotent producer's retry is answered with where its first copy
// was stored and stored once, on every replica, whatever its unique keys
// say: sequences decide. Late sends are stored, partial repeats, old
// epochs and ids never issued are refused.
func TestIdempotentSendsAreStoredOnce(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("idem", 2)
	m := g.master()
	ctx := context.Background()
	p := g.initProducer(m, "idem", 0)
	if p.ProducerId == 0 || p.ProducerEpoch != 0 || p.WindowMs != (2*time.Minute).Milliseconds() {
		t.Fatalf("init: %v", p)
	}
	send := func(recs []byte, seq int64) (*pb.SendMessageResponse, error) {
		return g.client(m).SendMessage(ctx, &pb.SendMessageRequest{Topic: "idem", QueueId: 1, Records: recs,
			ProducerId: p.ProducerId, ProducerEpoch: p.ProducerEpoch, Sequence: seq})
	}
	first, err := send(records(t, "idem", 1, "a", "b"), 0) // sequences 0, 1
	if err != nil {
		t.Fatal(err)
	}
	again, err := send(records(t, "idem", 1, "a", "b"), 0)
	if err != nil {
		t.Fatal(err)
	}
	sameResults(t, "the retry", again, first)
	// The same unique key under a new sequence is a new message: the
	// sequences decide, not the keys.
	if _, err := send(records(t, "idem", 1, "a"), 2); err != nil {
		t.Fatal(err)
	}
	// Sends overtaking each other: 5 before 3-4.
	for _, s := range []struct {
		seq    int64
		bodies []string
	}{{5, []string{"e"}}, {3, []string{"c", "d"}}} {
		if _, err := send(records(t, "idem", 1, s.bodies...), s.seq); err != nil {
			t.Fatalf("sequence %d: %v", s.seq, err)
		}
	}
	// A retry without unique keys is known, but its copies cannot be
	// found to answer with.
	if _, err := send(keyless(t, "idem", 1, "f"), 6); err != nil {
		t.Fatal(err)
	}
	_, err = send(keyless(t, "idem", 1, "f"), 6)
	wantStatus(t, err, codes.AlreadyExists, pb.ErrorReason_SEQUENCE_STORED)
	_, err = send(records(t, "idem", 1, "e", "g"), 5) // 5 stored, 6... 7 not
	_, err = send(records(t, "idem", 1, "f2", "g"), 6)
	wantStatus(t, err, codes.InvalidArgument, pb.ErrorReason_SEQUENCE_INVALID)
	_, err = g.client(m).SendMessage(ctx, &pb.SendMessageRequest{Topic: "idem", Records: records(t, "idem", 0, "x"), ProducerId: p.ProducerId + 100})
	wantStatus(t, err, codes.FailedPrecondition, pb.ErrorReason_UNKNOWN_PRODUCER)
	_, err = g.client(m).SendMessage(ctx, &pb.SendMessageRequest{Topic: "idem", Records: records(t, "idem", 0, "x"), ProducerId: p.ProducerId, Sequence: -1})
	wantStatus(t, err, codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT)

	// Retries racing their first copies: many land in the entry that
	// holds it, and are answered from it all the same.
	var wg sync.WaitGroup
	acks := make([][2]*pb.SendMessageResponse, 64)
	errs := make(chan error, 2*len(acks))
	for i := range acks {
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := fmt.Sprint("race-", i)
				resp, err := g.client(m).SendMessage(ctx, &pb.SendMessageRequest{Topic: "idem", QueueId: 0, Records: records(t, "idem", 0, body),
					ProducerId: p.ProducerId, Sequence: int64(i)})
				if err != nil {
					errs <- err
					return
				}
				acks[i][k] = resp
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range acks {
		sameResults(t, fmt.Sprint("racing send ", i), acks[i][1], acks[i][0])
	}

	// A new epoch fences the old one.
	if p2 := g.initProducer(m, "idem", p.ProducerId); p2.ProducerId != p.ProducerId || p2.ProducerEpoch != 1 {
		t.Fatalf("new epoch: %v", p2)
	}
	_, err = send(records(t, "idem", 1, "h"), 9)
	wantStatus(t, err, codes.FailedPrecondition, pb.ErrorReason_PRODUCER_FENCED)
	_, err = g.client(m).InitProducer(ctx, &pb.InitProducerRequest{Topic: "idem", ProducerId: 1 << 40})
	wantStatus(t, err, codes.FailedPrecondition, pb.ErrorReason_UNKNOWN_PRODUCER)

	g.quiesce()
	for i := range g.brokers {
		// a b | a | e | c d | f | 64 racing sends, once each
		if q1, q0 := len(g.pullRecords(i, "idem", 1)), len(g.pullRecords(i, "idem", 0)); q1 != 7 || q0 != 64 {
			t.Errorf("replica %d holds %d and %d messages, want 7 and 64", i+1, q1, q0)
		}
	}
	g.checkIdentical(nil)
}

// The sequences survive a snapshot, its install on a replica that fell
// behind the retained log, and a restart that replays the log over the
// store: that replica, made master, answers retries of sends from before
// and after its snapshot with their first copies, and issues no id twice.
func TestProducerSequencesSurviveSnapshotsAndRestarts(t *testing.T) {
	g := newGroup(t, 3, compactedLog)
	g.createTopic("idem", 1)
	m := g.master()
	p := g.initProducer(m, "idem", 0)
	behind := (m + 1) % 3
	req := func(n int) *pb.SendMessageRequest {
		return &pb.SendMessageRequest{Topic: "idem", Records: records(t, "idem", 0, fmt.Sprint("m", n)), ProducerId: p.ProducerId, Sequence: int64(n)}
	}
	var acks []*pb.SendMessageResponse
	sendRange := func(from, to int) {
		for n := from; n < to; n++ {
			resp, _, err := g.sendRedirecting(m, req(n), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			acks = append(acks, resp)
		}
	}
	sendRange(0, 100)
	left := g.describe(behind).AppliedIndex
	g.stop(behind)
	sendRange(100, 300)
	waitFor(t, 10*time.Second, func() bool { return !g.brokers[m].node.LogHolds(left + 1) })
	g.start(behind) // restores the master's snapshot
	g.quiesce()
	if g.brokers[behind].catchUps.Load() == 0 {
		t.Fatal("the replica caught up without a snapshot: the test did not reach the install path")
	}
	g.stop(behind)
	g.start(behind) // its own snapshot, then the log replayed over its store
	g.quiesce()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Whoever leads now (an election may have moved it since) hands over.
	if cur := g.master(); cur != behind {
		if _, err := g.client(cur).TransferLeader(ctx, &pb.TransferLeaderRequest{ToId: int32(behind + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := g.master(); got != behind {
		t.Fatalf("master is replica %d, want %d", got+1, behind+1)
	}
	for _, n := range []int{0, 99, 150, 255, 299} { // the window holds the last 256 sequences: 0 and 99 are the keys'
		resp, err := g.client(behind).SendMessage(ctx, req(n))
		if err != nil {
			t.Fatalf("retry of %d: %v", n, err)
		}
		sameResults(t, fmt.Sprint("retry of ", n), resp, acks[n])
	}
	if p2 := g.initProducer(behind, "idem", 0); p2.ProducerId != p.ProducerId+1 {
		t.Fatalf("the new master issued id %d, want %d", p2.ProducerId, p.ProducerId+1)
	}
	g.quiesce()
	if got := len(g.pullRecords(behind, "idem", 0)); got != 300 {
		t.Fatalf("%d messages stored, want 300", got)
	}
	g.checkIdentical(nil)
}
