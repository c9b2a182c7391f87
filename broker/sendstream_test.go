package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcmd "google.golang.org/grpc/metadata"
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
// certificate gets nothing stored. The sends batched in one request are
// checked together (the SDK batches sends to one topic).
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
	// A request's batched sends are checked together: one to a topic the
	// caller may not publish to refuses them all.
	s, err := g.as(userID("app")).SendMessageStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mixed := send(11, "orders")
	mixed.More = []*pb.SendStreamRequest{send(12, "payments"), send(13, "orders")}
	allowed := send(14, "orders")
	allowed.More = []*pb.SendStreamRequest{send(15, "orders")}
	for _, r := range []*pb.SendStreamRequest{mixed, allowed} {
		if err := s.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	answers := readStreamAnswers(t, s)
	if len(answers) != 5 {
		t.Fatalf("%d answers to 5 batched sends", len(answers))
	}
	for id, a := range answers {
		st := streamStatus(t, a)
		switch {
		case id >= 14 && st != nil:
			t.Fatalf("batched send %d refused: %v", id, st)
		case id < 14 && (st == nil || st.Code() != codes.PermissionDenied):
			t.Fatalf("send %d, batched with a refused topic: %v, want PermissionDenied", id, st)
		}
	}
	for topic, want := range map[string]int64{"orders": 4, "payments": 0} {
		offs, err := root.GetQueueOffsets(ctx, &pb.GetQueueOffsetsRequest{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		if got := offs.MaxOffset; got != want {
			t.Fatalf("%s holds %d messages, want %d", topic, got, want)
		}
	}
}

// A broker says in its stream's header that it reads batched sends; each
// send batched in a request is served on its own and answered by its id;
// to a producer that asked for batched answers (pb.SendBatchesKey) they
// may come batched, to one that did not, one a message.
func TestSendStreamServesBatchedSends(t *testing.T) {
	g := newGroup(t, 1, nil)
	g.createTopic("streamed", 1)
	for _, asks := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if asks {
			ctx = grpcmd.AppendToOutgoingContext(ctx, pb.SendBatchesKey, "1")
		}
		s, err := g.client(g.master()).SendMessageStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		md, err := s.Header()
		if err != nil || !slices.Contains(md.Get(pb.SendBatchesKey), "1") {
			t.Fatalf("the stream's header: %v, %v; want %s", md, err, pb.SendBatchesKey)
		}
		before := g.brokers[g.master()].Raft().LastIndex()
		batch := &pb.SendStreamRequest{Id: 1, Send: &pb.SendMessageRequest{Topic: "streamed", Records: records(t, "streamed", 0, "a")}, More: []*pb.SendStreamRequest{
			{Id: 2, Send: &pb.SendMessageRequest{Topic: "streamed", Records: records(t, "streamed", 0, "b")}},
			{Id: 3},
			{Id: 4, Send: &pb.SendMessageRequest{Topic: "streamed", Records: records(t, "streamed", 0, "c", "d")}},
		}}
		if err := s.Send(batch); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		answers := map[uint64]*pb.SendStreamResponse{}
		for {
			m, err := s.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(m.More) > 0 && !asks {
				t.Fatal("batched answers to a producer that did not ask for them")
			}
			for _, a := range m.Answers() {
				answers[a.Id] = a
			}
		}
		if len(answers) != 4 {
			t.Fatalf("%d answers to 4 sends: %v", len(answers), answers)
		}
		if st := streamStatus(t, answers[3]); st == nil || st.Code() != codes.InvalidArgument {
			t.Fatalf("send 3, which carries nothing: %v, want InvalidArgument", st)
		}
		var offsets []int64
		for _, id := range []uint64{1, 2, 4} {
			a := answers[id]
			if st := streamStatus(t, a); st != nil {
				t.Fatalf("send %d: %v", id, st)
			}
			for _, r := range a.Result.Results {
				offsets = append(offsets, r.QueueOffset)
			}
		}
		slices.Sort(offsets)
		base := offsets[0]
		if want := []int64{base, base + 1, base + 2, base + 3}; !slices.Equal(offsets, want) {
			t.Fatalf("the batch's 4 messages stored at %v", offsets)
		}
		// The batch's sends came together to an idle group: one entry.
		if after := g.brokers[g.master()].Raft().LastIndex(); after != before+1 {
			t.Fatalf("the batch's sends took %d Raft entries, want 1", after-before)
		}
	}
}

// fakeSendStream is a send stream's server side in a unit test: RecvMsg
// hands out requests with ids 1, 2, ... and counts its calls.
// With batch > 1, each request batches that many sends (ids 1, 2, ...
// across requests).
type fakeSendStream struct {
	pb.Broker_SendMessageStreamServer
	ctx   context.Context
	batch int
	reads atomic.Int32
}

func (f *fakeSendStream) Context() context.Context { return f.ctx }

func (f *fakeSendStream) RecvMsg(m any) error {
	n := max(f.batch, 1)
	first := uint64(int(f.reads.Add(1)-1)*n + 1)
	r := m.(*pb.SendStreamRequest)
	r.Id = first
	for i := 1; i < n; i++ {
		r.More = append(r.More, &pb.SendStreamRequest{Id: first + uint64(i)})
	}
	return nil
}

// A stream reads no request while its connection's streamed sends in
// progress are at the bound, and reads the next as soon as one ends. The
// sends batched in one request take a slot each and go on together as far
// as slots are free: past the bound the rest of the batch waits for sends
// in progress to end.
func TestSendStreamReadsNoMoreThanItsConnectionsBound(t *testing.T) {
	for _, tc := range []struct {
		batch     int
		first     [][]uint64 // the sends handed on together while slots are free
		wantReads int32
	}{
		{batch: 1, first: [][]uint64{{1}, {2}}, wantReads: 3},
		{batch: 3, first: [][]uint64{{1, 2}}, wantReads: 1},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		stream := &fakeSendStream{ctx: ctx, batch: tc.batch}
		slots := make(chan struct{}, 2)
		read := make(chan streamedSends)
		ended := make(chan error, 1)
		go receiveSends(stream, slots, read, ended)
		ids := func(r streamedSends) []uint64 {
			var out []uint64
			for _, s := range r.sends {
				out = append(out, s.Id)
			}
			return out
		}
		for _, want := range tc.first {
			if got := ids(<-read); !slices.Equal(got, want) {
				t.Fatalf("batches of %d: sends %v handed on together, want %v", tc.batch, got, want)
			}
		}
		// Both slots are taken: an absence, so a bounded wait rather than a poll.
		select {
		case r := <-read:
			t.Fatalf("batches of %d: sends %v handed on with 2 sends in progress and a bound of 2", tc.batch, ids(r))
		case <-time.After(100 * time.Millisecond):
		}
		<-slots // a send ends
		if got := ids(<-read); !slices.Equal(got, []uint64{3}) {
			t.Fatalf("batches of %d: sends %v handed on after one ended, want [3]", tc.batch, got)
		}
		if n := stream.reads.Load(); n != tc.wantReads {
			t.Fatalf("batches of %d: %d requests read, want %d", tc.batch, n, tc.wantReads)
		}
		cancel()
		if err := <-ended; status.Code(err) != codes.Canceled {
			t.Fatalf("batches of %d: the receiver ended with %v, want Canceled", tc.batch, err)
		}
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

// heldAnswerStream is a send stream's server side in a unit test: its
// first Send waits for release; every Send's message goes to sent.
type heldAnswerStream struct {
	pb.Broker_SendMessageStreamServer
	release chan struct{}
	sent    chan *pb.SendStreamResponse
	calls   atomic.Int32
}

func (h *heldAnswerStream) Send(m *pb.SendStreamResponse) error {
	h.sent <- m
	if h.calls.Add(1) == 1 {
		<-h.release
	}
	return nil
}

// Answers that finish while one is being sent go together in the next
// message to a producer that reads batches, one a message to one that
// does not.
func TestSendStreamBatchesAnswersThatWait(t *testing.T) {
	for _, batches := range []bool{true, false} {
		h := &heldAnswerStream{release: make(chan struct{}), sent: make(chan *pb.SendStreamResponse, 8)}
		a := &streamAnswers{stream: h, batches: batches}
		done := make(chan error, 1)
		go func() { done <- a.send(pb.SendStreamAnswer(1, &pb.SendMessageResponse{}, nil)) }()
		if first := <-h.sent; first.Id != 1 || len(first.More) != 0 {
			t.Fatalf("the first message: %v", first.Answers())
		}
		if batches {
			for id := uint64(2); id <= 4; id++ { // queued behind the first
				if err := a.send(pb.SendStreamAnswer(id, nil, status.Error(codes.InvalidArgument, "bad"))); err != nil {
					t.Fatal(err)
				}
			}
			close(h.release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			m := <-h.sent
			var ids []uint64
			for _, r := range m.Answers() {
				ids = append(ids, r.Id)
				if st := streamStatus(t, r); st == nil || st.Code() != codes.InvalidArgument {
					t.Fatalf("answer %d: %v, want its own status", r.Id, st)
				}
			}
			if !slices.Equal(ids, []uint64{2, 3, 4}) || len(h.sent) != 0 {
				t.Fatalf("the answers queued behind the first went in messages %v (and %d more), want one of [2 3 4]", ids, len(h.sent))
			}
			continue
		}
		// Without batches the next answer waits for the first's Send.
		second := make(chan error, 1)
		go func() { second <- a.send(pb.SendStreamAnswer(2, &pb.SendMessageResponse{}, nil)) }()
		select {
		case m := <-h.sent:
			t.Fatalf("answer %d sent while another was being sent", m.Id)
		case <-time.After(50 * time.Millisecond):
		}
		close(h.release)
		if m := <-h.sent; m.Id != 2 || len(m.More) != 0 {
			t.Fatalf("the second message: %v", m.Answers())
		}
		if err := errors.Join(<-done, <-second); err != nil {
			t.Fatal(err)
		}
	}
}
