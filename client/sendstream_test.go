package client

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
)

// fakeStreamBroker is a broker's gRPC server in this package's tests:
// SendMessage answers with the request's queue; SendMessageStream is
// stream, or unimplemented when nil.
type fakeStreamBroker struct {
	pb.UnimplementedBrokerServer
	unary  atomic.Int32
	stream func(pb.Broker_SendMessageStreamServer) error
}

func (f *fakeStreamBroker) SendMessage(_ context.Context, req *pb.SendMessageRequest) (*pb.SendMessageResponse, error) {
	f.unary.Add(1)
	return &pb.SendMessageResponse{QueueId: req.QueueId}, nil
}

func (f *fakeStreamBroker) SendMessageStream(s pb.Broker_SendMessageStreamServer) error {
	if f.stream == nil {
		return status.Error(codes.Unimplemented, "no SendMessageStream")
	}
	return f.stream(s)
}

// serveFake serves f on a loopback socket and returns a client of it.
func serveFake(t *testing.T, f *fakeStreamBroker) pb.BrokerClient {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterBrokerServer(srv, f)
	go srv.Serve(l)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop() })
	return pb.NewBrokerClient(conn)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Answers find their senders by id, whatever order they come in.
func TestSendStreamMatchesAnswersToSends(t *testing.T) {
	const n = 3
	f := &fakeStreamBroker{stream: func(s pb.Broker_SendMessageStreamServer) error {
		var got []*pb.SendStreamRequest
		for len(got) < n {
			r, err := s.Recv()
			if err != nil {
				return err
			}
			if len(r.More) > 0 { // this broker did not say it reads batches
				return status.Error(codes.InvalidArgument, "a batch to a broker that reads none")
			}
			got = append(got, r)
		}
		for i := n - 1; i >= 0; i-- { // the last sent is answered first
			if err := s.Send(&pb.SendStreamResponse{Id: got[i].Id, Result: &pb.SendMessageResponse{QueueId: got[i].Send.QueueId}}); err != nil {
				return err
			}
		}
		return nil
	}}
	b := serveFake(t, f)
	sendAtOnce(t, b, n)
	if f.unary.Load() != 0 {
		t.Fatalf("%d sends went as RPCs", f.unary.Load())
	}
}

// sendAtOnce sends n sends to topic t at once on a stream to b, to queues
// 0 to n-1; the fake broker answers each with its queue, and each sender
// must get its own answer.
func sendAtOnce(t *testing.T, b pb.BrokerClient, n int32) {
	t.Helper()
	ctx := testContext(t)
	ss := newSendStreams()
	defer ss.close()
	s := ss.of("fake")
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for q := range n {
		wg.Go(func() {
			resp, err := s.send(ctx, b, &pb.SendMessageRequest{Topic: "t", QueueId: q})
			switch {
			case err != nil:
				errs <- err
			case resp.QueueId != q:
				errs <- errors.New("a send got another's answer")
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A broker without the stream gets the producer's sends as RPCs, the
// first one too.
func TestProducerSendsRPCsToABrokerWithoutTheStream(t *testing.T) {
	f := &fakeStreamBroker{}
	b := serveFake(t, f)
	ctx := testContext(t)
	p := &Producer{streams: newSendStreams()}
	defer p.streams.close()
	for q := range int32(3) {
		resp, err := p.sendRequest(ctx, "fake", b, &pb.SendMessageRequest{Topic: "t", QueueId: q})
		if err != nil || resp.QueueId != q {
			t.Fatalf("send %d: %v, %v", q, resp, err)
		}
	}
	if f.unary.Load() != 3 {
		t.Fatalf("%d of 3 sends went as RPCs", f.unary.Load())
	}
	if s := p.streams.of("fake"); !s.unsupported {
		t.Fatal("the stream is still tried after the broker said it has none")
	}
}

// A stream that ends fails the sends waiting on it with why (their
// outcome unknown), and the next send opens a new one.
func TestSendStreamEndedFailsItsSendsAndTheNextOpensAnother(t *testing.T) {
	var opened atomic.Int32
	f := &fakeStreamBroker{stream: func(s pb.Broker_SendMessageStreamServer) error {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		if opened.Add(1) == 1 {
			return status.Error(codes.Unavailable, "the broker is going away")
		}
		return s.Send(&pb.SendStreamResponse{Id: r.Id, Result: &pb.SendMessageResponse{QueueId: r.Send.QueueId}})
	}}
	b := serveFake(t, f)
	ctx := testContext(t)
	ss := newSendStreams()
	defer ss.close()
	s := ss.of("fake")
	if _, err := s.send(ctx, b, &pb.SendMessageRequest{Topic: "t", QueueId: 1}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a send on a stream that ended: %v, want Unavailable", err)
	}
	resp, err := s.send(ctx, b, &pb.SendMessageRequest{Topic: "t", QueueId: 2})
	if err != nil || resp.QueueId != 2 || opened.Load() != 2 {
		t.Fatalf("the next send: %v, %v on stream %d", resp, err, opened.Load())
	}
}

// A broker's error status reaches the sender as the status it sent; a
// sender whose context ends stops waiting, and the producer's close ends
// the stream.
func TestSendStreamCarriesStatusesAndHonoursContexts(t *testing.T) {
	f := &fakeStreamBroker{stream: func(s pb.Broker_SendMessageStreamServer) error {
		for {
			r, err := s.Recv()
			if err != nil {
				return err
			}
			if r.Send.QueueId == 9 { // never answered
				continue
			}
			if err := s.Send(pb.SendStreamAnswer(r.Id, nil, status.Error(codes.InvalidArgument, "queue 1 is bad"))); err != nil {
				return err
			}
		}
	}}
	b := serveFake(t, f)
	ss := newSendStreams()
	s := ss.of("fake")
	if _, err := s.send(testContext(t), b, &pb.SendMessageRequest{Topic: "t", QueueId: 1}); status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "queue 1 is bad" {
		t.Fatalf("the broker's status: %v", err)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.send(short, b, &pb.SendMessageRequest{Topic: "t", QueueId: 9}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a send whose context ended: %v, want DeadlineExceeded", err)
	}
	ss.close()
	if _, err := s.send(testContext(t), b, &pb.SendMessageRequest{Topic: "t", QueueId: 1}); !errors.Is(err, errClosed) {
		t.Fatalf("a send after close: %v", err)
	}
}

// A broker that reads batches (its header says pb.SendBatchesKey) may
// answer many sends in one message: each sender gets its own answer. The
// producer asked for batched answers in its stream's metadata.
func TestSendStreamTakesBatchedAnswers(t *testing.T) {
	const n = 32
	asked := make(chan bool, 1)
	f := &fakeStreamBroker{stream: func(s pb.Broker_SendMessageStreamServer) error {
		md, _ := metadata.FromIncomingContext(s.Context())
		asked <- slices.Contains(md.Get(pb.SendBatchesKey), "1")
		if err := s.SendHeader(metadata.Pairs(pb.SendBatchesKey, "1")); err != nil {
			return err
		}
		var got []*pb.SendStreamRequest
		for len(got) < n {
			r, err := s.Recv()
			if err != nil {
				return err
			}
			got = append(got, r.Sends()...)
		}
		var answers []*pb.SendStreamResponse // all of them in one message
		for _, r := range got {
			answers = append(answers, &pb.SendStreamResponse{Id: r.Id, Result: &pb.SendMessageResponse{QueueId: r.Send.QueueId}})
		}
		answers[0].More = answers[1:]
		return s.Send(answers[0])
	}}
	b := serveFake(t, f)
	sendAtOnce(t, b, n)
	if !<-asked {
		t.Fatal("the producer did not ask for batched answers")
	}
}

// heldSendStream is a send stream's client side in a unit test: its first
// Send waits for release; every Send's message goes to sent.
type heldSendStream struct {
	pb.Broker_SendMessageStreamClient
	release chan struct{}
	sent    chan *pb.SendStreamRequest
	calls   atomic.Int32
}

func (h *heldSendStream) Send(m *pb.SendStreamRequest) error {
	h.sent <- m
	if h.calls.Add(1) == 1 {
		<-h.release
	}
	return nil
}

// streamedSends are n sends to topic with ids from first, their records
// size bytes each.
func streamedSends(first uint64, n int, topic string, size int) []*pb.SendStreamRequest {
	var out []*pb.SendStreamRequest
	for i := range n {
		out = append(out, &pb.SendStreamRequest{Id: first + uint64(i), Send: &pb.SendMessageRequest{Topic: topic, Records: make([]byte, size)}})
	}
	return out
}

// The sends queued while one message is being written go in the next
// messages, batched to a broker that reads batches: only sends of one
// topic together, at most batchSends of them and batchBytes of records;
// to a broker that reads none, one a message. A send whose sender stopped
// waiting before its turn is not written.
func TestSendStreamBatchesWhatQueuesWhileOneIsWritten(t *testing.T) {
	ctx := testContext(t)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	queue := func() []queuedSend { // a batch's first send carries the batch: new sends for each case
		var q []queuedSend
		for _, r := range slices.Concat(
			streamedSends(2, 3, "a", 100),
			streamedSends(200, 1, "a", 100), // its sender gone: not written
			streamedSends(201, 1, "b", 100), // the same
			streamedSends(5, 1, "b", 100),
			streamedSends(6, batchSends+2, "a", 10),
			streamedSends(100, 3, "a", batchBytes/2),
		) {
			c := ctx
			if r.Id >= 200 {
				c = gone
			}
			q = append(q, queuedSend{c, r})
		}
		return q
	}
	for _, tc := range []struct {
		name    string
		batches bool
		want    [][]uint64 // each message's ids, after the first
	}{
		{"a broker that reads batches", true, [][]uint64{
			{2, 3, 4}, {5}, idRange(6, 6+batchSends), {6 + batchSends, 7 + batchSends, 100}, {101, 102},
		}},
		{"a broker that reads none", false, oneEach(slices.Concat(idRange(2, 6+batchSends+2), idRange(100, 103)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queued := queue()
			h := &heldSendStream{release: make(chan struct{}), sent: make(chan *pb.SendStreamRequest, len(queued)+1)}
			o := &openStream{stream: h, cancel: func() {}}
			o.batches.Store(tc.batches)
			done := make(chan struct{})
			go func() {
				defer close(done)
				o.write(queuedSend{ctx, streamedSends(1, 1, "a", 100)[0]})
			}()
			if first := <-h.sent; first.Id != 1 || len(first.More) != 0 {
				t.Fatalf("the first message: %v", first.Sends())
			}
			for _, q := range queued { // each queued behind the one being written
				o.write(q)
			}
			close(h.release)
			<-done
			close(h.sent)
			var got [][]uint64
			for m := range h.sent {
				var ids []uint64
				for _, r := range m.Sends() {
					ids = append(ids, r.Id)
				}
				got = append(got, ids)
			}
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Fatalf("messages %v, want %v", got, tc.want)
			}
		})
	}
}

// oneEach is a message for each id.
func oneEach(ids []uint64) [][]uint64 {
	var out [][]uint64
	for _, id := range ids {
		out = append(out, []uint64{id})
	}
	return out
}

func idRange(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// gatedSendStream is a send stream's client side in a unit test: each
// Send waits for a token on gate, or for the stream to be given up.
type gatedSendStream struct {
	pb.Broker_SendMessageStreamClient
	gate    chan struct{}
	sent    chan *pb.SendStreamRequest
	stopped chan struct{} // closed by the openStream's cancel
}

func (g *gatedSendStream) Send(m *pb.SendStreamRequest) error {
	g.sent <- m
	select {
	case <-g.gate:
		return nil
	case <-g.stopped:
		return io.EOF
	}
}

// A Send that blocks (the broker reads no more) gives the stream up when
// the context of the send it writes ends, not the writer's: a writer
// whose own sender stopped waiting goes on writing the sends queued
// behind it.
func TestSendStreamGivesUpPastTheContextOfTheSendBeingWritten(t *testing.T) {
	g := &gatedSendStream{gate: make(chan struct{}), sent: make(chan *pb.SendStreamRequest, 2), stopped: make(chan struct{})}
	o := &openStream{stream: g, cancel: sync.OnceFunc(func() { close(g.stopped) })}
	ctxA, cancelA := context.WithCancel(testContext(t))
	ctxB, cancelB := context.WithCancel(testContext(t))
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.write(queuedSend{ctxA, streamedSends(1, 1, "a", 10)[0]})
	}()
	<-g.sent                                                   // A's send is being written
	o.write(queuedSend{ctxB, streamedSends(2, 1, "b", 10)[0]}) // queued behind it
	g.gate <- struct{}{}                                       // A's Send returns
	if m := <-g.sent; m.Id != 2 {                              // B's is being written, by A's writer
		t.Fatalf("the second message carries send %d, want 2", m.Id)
	}
	cancelA()
	// An absence, so a bounded wait rather than a poll.
	time.Sleep(50 * time.Millisecond)
	if o.stuck.Load() {
		t.Fatal("the stream was given up when the writer's own sender stopped waiting")
	}
	cancelB()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the write blocked past the context of the send it wrote")
	}
	if !o.stuck.Load() {
		t.Fatal("the stream was not given up past the context of the send it wrote")
	}
}
