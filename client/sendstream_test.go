package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
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
	ctx := testContext(t)
	ss := newSendStreams()
	defer ss.close()
	s := ss.of("fake")
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for q := range int32(n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.send(ctx, b, &pb.SendMessageRequest{Topic: "t", QueueId: q})
			switch {
			case err != nil:
				errs <- err
			case resp.QueueId != q:
				errs <- errors.New("a send got another's answer")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if f.unary.Load() != 0 {
		t.Fatalf("%d sends went as RPCs", f.unary.Load())
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
