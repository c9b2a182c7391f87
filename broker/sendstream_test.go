package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
)

// readStreamAnswers reads a send stream's answers until the broker ends it,
// by id.
func readStreamAnswers(t *testing.T, s pb.Broker_SendMessageStreamClient) map[uint64]*pb.SendStreamResponse {
	t.Helper()
	out := map[uint64]*pb.SendStreamResponse{}
	for {
		a, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("the stream ended with %v after %d answers", err, len(out))
		}
		if _, dup := out[a.Id]; dup {
			t.Fatalf("send %d answered twice", a.Id)
		}
		out[a.Id] = a
	}
}

// streamStatus is the status an answer carries, nil for a result.
func streamStatus(t *testing.T, a *pb.SendStreamResponse) *status.Status {
	t.Helper()
	err := a.Err()
	if err == nil {
		return nil
	}
	if status.Code(err) == codes.Internal { // no result nor status, or one that does not decode
		t.Fatalf("send %d: a malformed answer: %v", a.Id, err)
	}
	return status.Convert(err)
}

// Each send on a stream is checked and answered on its own, by its id: a
// bad one gets SendMessage's error (its reason too) and the sends around
// it are stored, in the order sent on one queue.
func TestSendStreamAnswersEachSendOnItsOwn(t *testing.T) {
	g := newGroup(t, 1, nil)
	g.createTopic("streamed", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := g.client(g.master()).SendMessageStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sends := []*pb.SendStreamRequest{
		{Id: 7, Send: &pb.SendMessageRequest{Topic: "streamed", QueueId: 1, Records: records(t, "streamed", 1, "first")}},
		{Id: 8, Send: &pb.SendMessageRequest{Topic: "streamed", QueueId: 5, Records: records(t, "streamed", 5, "no such queue")}},
		{Id: 9},
		{Id: 10, Send: &pb.SendMessageRequest{Topic: "streamed", QueueId: 1, Records: records(t, "streamed", 1, "second", "third")}},
	}
	for _, r := range sends {
		if err := s.Send(r); err != nil {
			t.Fatal(err)
		}
		if r.Id == 7 { // answered before the next is sent: its offsets come first
			a, err := s.Recv()
			if err != nil || a.Id != 7 {
				t.Fatalf("the first answer: %v, %v", a, err)
			}
			if st := streamStatus(t, a); st != nil || len(a.Result.Results) != 1 || a.Result.Results[0].QueueOffset != 0 {
				t.Fatalf("send 7: %v, %v", st, a.Result)
			}
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	answers := readStreamAnswers(t, s)
	if len(answers) != 3 {
		t.Fatalf("%d answers after the first, want 3: %v", len(answers), answers)
	}
	for id, want := range map[uint64]pb.ErrorReason{8: pb.ErrorReason_ILLEGAL_ARGUMENT, 9: pb.ErrorReason_ILLEGAL_ARGUMENT} {
		st := streamStatus(t, answers[id])
		if st == nil || st.Code() != codes.InvalidArgument {
			t.Fatalf("send %d: %v, want InvalidArgument", id, st)
		}
		if reason, _ := pb.ReasonOf(st.Err()); reason != want {
			t.Fatalf("send %d: reason %v, want %v (%v)", id, reason, want, st)
		}
	}
	a := answers[10]
	if st := streamStatus(t, a); st != nil {
		t.Fatalf("send 10: %v", st)
	}
	if len(a.Result.Results) != 2 || a.Result.Results[0].QueueOffset != 1 || a.Result.Results[1].QueueOffset != 2 || a.Result.QueueId != 1 {
		t.Fatalf("send 10 stored at %v on queue %d, want offsets 1 and 2 of queue 1", a.Result.Results, a.Result.QueueId)
	}
}

// A replica whose store failed answers each streamed send with the
// failure, as it refuses SendMessage.
func TestSendStreamRefusesSendsOnAFailedStore(t *testing.T) {
	g := newGroup(t, 1, nil)
	g.createTopic("streamed", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := g.client(g.master()).SendMessageStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(id uint64) *pb.SendStreamResponse {
		if err := s.Send(&pb.SendStreamRequest{Id: id, Send: &pb.SendMessageRequest{Topic: "streamed", Records: records(t, "streamed", 0, "m")}}); err != nil {
			t.Fatal(err)
		}
		a, err := s.Recv()
		if err != nil || a.Id != id {
			t.Fatalf("send %d: %v, %v", id, a, err)
		}
		return a
	}
	if st := streamStatus(t, send(1)); st != nil {
		t.Fatalf("before the failure: %v", st)
	}
	g.brokers[0].fsm.fail(errors.New("injected: the disk is gone"))
	st := streamStatus(t, send(2))
	if reason, _ := pb.ReasonOf(st.Err()); st == nil || st.Code() != codes.Unavailable || reason != pb.ErrorReason_STORE_ERROR {
		t.Fatalf("after the failure: %v, want Unavailable STORE_ERROR", st)
	}
}

// Under access control each streamed send is checked on its own: one to
// a topic the caller may not publish to is refused alone, and the stream
// goes on serving the caller's other sends; a caller without a
// certificate gets nothing stored.
func TestSendStreamChecksEachSendsAccess(t *testing.T) {
	g := newACLGroup(t)
	waitFor(t, 10*time.Second, g.brokers[0].IsMaster)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	root := g.as(userID("root"))
	createTopics(ctx, t, root, 1, "orders", "payments")
	send := func(id uint64, topic string) *pb.SendStreamRequest {
		return &pb.SendStreamRequest{Id: id, Send: &pb.SendMessageRequest{Topic: topic, Records: records(t, topic, 0, fmt.Sprint(topic, id))}}
	}
	for who, c := range map[string]pb.BrokerClient{"the app": g.as(userID("app")), "no certificate": g.as(cluster.Identity{})} {
		s, err := c.SendMessageStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []*pb.SendStreamRequest{send(1, "orders"), send(2, "payments"), send(3, "orders")} {
			if err := s.Send(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		answers := readStreamAnswers(t, s)
		if len(answers) != 3 {
			t.Fatalf("%s: %d answers to 3 sends", who, len(answers))
		}
		for id, a := range answers {
			st := streamStatus(t, a)
			allowed := who == "the app" && id != 2
			switch {
			case allowed && st != nil:
				t.Fatalf("%s: send %d refused: %v", who, id, st)
			case !allowed && (st == nil || (st.Code() != codes.PermissionDenied && st.Code() != codes.Unauthenticated)):
				t.Fatalf("%s: send %d: %v, want a refusal", who, id, st)
			}
		}
	}
	for topic, want := range map[string]int64{"orders": 2, "payments": 0} {
		offs, err := root.GetQueueOffsets(ctx, &pb.GetQueueOffsetsRequest{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		if got := offs.MaxOffset; got != want {
			t.Fatalf("%s holds %d messages, want %d", topic, got, want)
		}
	}
}

// fakeSendStream is a send stream's server side in a unit test: RecvMsg
// hands out requests with ids 1, 2, ... and counts its calls.
type fakeSendStream struct {
	pb.Broker_SendMessageStreamServer
	ctx   context.Context
	reads atomic.Int32
}

func (f *fakeSendStream) Context() context.Context { return f.ctx }

func (f *fakeSendStream) RecvMsg(m any) error {
	m.(*pb.SendStreamRequest).Id = uint64(f.reads.Add(1))
	return nil
}

// A stream reads no request while its connection's streamed sends in
// progress are at the bound, and reads the next as soon as one ends.
func TestSendStreamReadsNoMoreThanItsConnectionsBound(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	stream := &fakeSendStream{ctx: ctx}
	slots := make(chan struct{}, 2)
	read := make(chan streamedSend)
	ended := make(chan error, 1)
	go receiveSends(stream, slots, read, ended)
	defer func() {
		cancel()
		if err := <-ended; status.Code(err) != codes.Canceled {
			t.Errorf("the receiver ended with %v, want Canceled", err)
		}
	}()
	for want := uint64(1); want <= 2; want++ {
		if r := <-read; r.req.Id != want {
			t.Fatalf("read send %d, want %d", r.req.Id, want)
		}
	}
	// Both slots are taken: an absence, so a bounded wait rather than a poll.
	time.Sleep(100 * time.Millisecond)
	if n := stream.reads.Load(); n != 2 {
		t.Fatalf("%d requests read with 2 sends in progress and a bound of 2", n)
	}
	<-slots // a send ends
	if r := <-read; r.req.Id != 3 {
		t.Fatalf("read send %d after one ended, want 3", r.req.Id)
	}
}

// A broker that closes ends its send streams with NOT_LEADER, which sends
// the producer to the next master, rather than holding gRPC's graceful
// stop until it gives up and cuts the connection.
func TestSendStreamEndsWhenTheBrokerCloses(t *testing.T) {
	g := newGroup(t, 1, nil)
	g.createTopic("streamed", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := g.client(0).SendMessageStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&pb.SendStreamRequest{Id: 1, Send: &pb.SendMessageRequest{Topic: "streamed", Records: records(t, "streamed", 0, "m")}}); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Recv(); err != nil || streamStatus(t, a) != nil {
		t.Fatalf("the send before the close: %v, %v", a, err)
	}
	closed := make(chan error, 1)
	go func() { closed <- g.brokers[0].Close() }()
	_, err = s.Recv()
	if reason, _ := pb.ReasonOf(err); reason != pb.ErrorReason_NOT_LEADER {
		t.Fatalf("the stream of a closing broker ended with %v, want NOT_LEADER", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
