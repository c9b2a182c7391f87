package client

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
)

// numberingBroker stands in for a group's master in this package's unit
// test of the producer's numbering: it issues producer ids (or none), and
// records the numbers each send carries.
type numberingBroker struct {
	pb.UnimplementedBrokerServer
	noIDs     bool         // answer InitProducer as a broker from before ids
	forgetAt  atomic.Int32 // refuse this numbered send (1: the first) with UNKNOWN_PRODUCER
	numbered  atomic.Int32
	holdFirst atomic.Bool // answer the next send after the producer's attempt timeout
	inits     atomic.Int32
	nextID    atomic.Int64
	mu        sync.Mutex
	sends     []*pb.SendMessageRequest
}

func (b *numberingBroker) InitProducer(ctx context.Context, req *pb.InitProducerRequest) (*pb.InitProducerResponse, error) {
	b.inits.Add(1)
	if b.noIDs {
		return nil, status.Error(codes.Unimplemented, "no InitProducer")
	}
	return &pb.InitProducerResponse{Group: "broker-a", ProducerId: 7 + b.nextID.Add(1) - 1}, nil
}

func (b *numberingBroker) SendMessage(ctx context.Context, req *pb.SendMessageRequest) (*pb.SendMessageResponse, error) {
	b.mu.Lock()
	b.sends = append(b.sends, &pb.SendMessageRequest{ProducerId: req.ProducerId, ProducerEpoch: req.ProducerEpoch, Sequence: req.Sequence})
	b.mu.Unlock()
	if req.ProducerId != 0 && b.numbered.Add(1) == b.forgetAt.Load() {
		return nil, statusWithReason(codes.FailedPrecondition, pb.ErrorReason_UNKNOWN_PRODUCER)
	}
	if b.holdFirst.CompareAndSwap(true, false) {
		time.Sleep(300 * time.Millisecond) // stored, and the answer late: an unknown outcome
	}
	return &pb.SendMessageResponse{Group: "broker-a", QueueId: req.QueueId, Results: []*pb.SendResult{{MsgId: "broker-a@1"}}}, nil
}

func (b *numberingBroker) numbers() [][3]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out [][3]int64
	for _, s := range b.sends {
		out = append(out, [3]int64{s.ProducerId, int64(s.ProducerEpoch), s.Sequence})
	}
	return out
}

func statusWithReason(code codes.Code, reason pb.ErrorReason) error {
	return pb.StatusError(code, reason, reason.String(), nil)
}

func numberingProducer(t *testing.T, b *numberingBroker, opts ...Option) *Producer {
	t.Helper()
	routes := &routeServer{groups: map[string]string{"broker-a": serve(t, func(s *grpc.Server) { pb.RegisterBrokerServer(s, b) })}}
	ns := serve(t, func(s *grpc.Server) { pb.RegisterNameServerServer(s, routes) })
	p, err := NewProducer(append([]Option{WithNameServers(ns), WithLogger(quiet), WithAttemptTimeout(100 * time.Millisecond), WithFaultIsolation(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown() })
	return p
}

func wantNumbers(t *testing.T, what string, got, want [][3]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: sends carried %v, want %v", what, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: sends carried %v, want %v", what, got, want)
		}
	}
}

// The producer asks its group for an id once, numbers its messages on
// the queue, and tries a send with an unknown outcome again with the same
// numbers; a batch takes a number per message.
func TestProducerNumbersItsSends(t *testing.T) {
	b := &numberingBroker{}
	p := numberingProducer(t, b)
	ctx := context.Background()
	b.holdFirst.Store(true)
	if _, err := p.Send(ctx, &Message{Topic: "t", Body: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendBatch(ctx, []*Message{{Topic: "t", Body: []byte("b")}, {Topic: "t", Body: []byte("c")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, &Message{Topic: "t", Body: []byte("d")}); err != nil {
		t.Fatal(err)
	}
	wantNumbers(t, "sends", b.numbers(), [][3]int64{{7, 0, 0}, {7, 0, 0}, {7, 0, 1}, {7, 0, 3}})
	if n := b.inits.Load(); n != 1 {
		t.Fatalf("%d InitProducer calls, want 1", n)
	}
}

// A group that forgot the producer's id refuses the send; the producer
// asks for a new id and sends it numbered anew.
func TestProducerAsksAgainForAForgottenID(t *testing.T) {
	b := &numberingBroker{}
	p := numberingProducer(t, b)
	ctx := context.Background()
	if _, err := p.Send(ctx, &Message{Topic: "t", Body: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	b.forgetAt.Store(2)
	if _, err := p.Send(ctx, &Message{Topic: "t", Body: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	wantNumbers(t, "sends", b.numbers(), [][3]int64{{7, 0, 0}, {7, 0, 1}, {8, 0, 2}})
}

// A group that issues no ids (a broker from before them) gets sends
// without numbers, and is asked once; so does every group with
// WithProducerIDs(false), never asked.
func TestProducerWithoutIDs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		b         *numberingBroker
		opt       Option
		wantInits int32
	}{
		{"old broker", &numberingBroker{noIDs: true}, WithProducerIDs(true), 1},
		{"ids off", &numberingBroker{}, WithProducerIDs(false), 0},
	} {
		p := numberingProducer(t, tc.b, tc.opt)
		for range 2 {
			if _, err := p.Send(context.Background(), &Message{Topic: "t", Body: []byte("a")}); err != nil {
				t.Fatal(err)
			}
		}
		wantNumbers(t, tc.name, tc.b.numbers(), [][3]int64{{}, {}})
		if n := tc.b.inits.Load(); n != tc.wantInits {
			t.Fatalf("%s: %d InitProducer calls, want %d", tc.name, n, tc.wantInits)
		}
	}
}

// A group that forgets the id after a try with an unknown outcome: the
// send goes on without numbers, for only its unique keys can find the
// copy the first try may have stored.
func TestProducerForgottenAfterAnUnknownOutcome(t *testing.T) {
	b := &numberingBroker{}
	p := numberingProducer(t, b)
	b.holdFirst.Store(true) // the first try's answer comes too late
	b.forgetAt.Store(2)     // and its retry is refused: the id is forgotten
	if _, err := p.Send(context.Background(), &Message{Topic: "t", Body: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	wantNumbers(t, "sends", b.numbers(), [][3]int64{{7, 0, 0}, {7, 0, 0}, {}})
}
