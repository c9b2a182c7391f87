package client

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/raftmq/raftmq/cluster/pb"
)

// recordingBroker stands in for a group's master in this package's unit
// test of the producer's retries: it answers every send as stored, after
// holding the first one it gets past the producer's attempt timeout.
type recordingBroker struct {
	pb.UnimplementedBrokerServer
	group string
	held  *atomic.Pointer[recordingBroker] // the broker that got the first send of all, which it held
	sent  atomic.Int32
}

func (b *recordingBroker) SendMessage(ctx context.Context, req *pb.SendMessageRequest) (*pb.SendMessageResponse, error) {
	b.sent.Add(1)
	if b.held.CompareAndSwap(nil, b) {
		time.Sleep(500 * time.Millisecond) // stored, and the answer late: an unknown outcome
	}
	return &pb.SendMessageResponse{Group: b.group, QueueId: req.QueueId, Results: []*pb.SendResult{{MsgId: b.group + "-1"}}}, nil
}

// routeServer routes topic "t" to two groups of one queue each.
type routeServer struct {
	pb.UnimplementedNameServerServer
	groups map[string]string // group -> its master's address
}

func (n *routeServer) GetRoute(_ context.Context, req *pb.GetRouteRequest) (*pb.RouteResponse, error) {
	resp := &pb.RouteResponse{Topic: req.Topic}
	for group, addr := range n.groups {
		resp.Groups = append(resp.Groups, &pb.GroupRoute{Group: group, ReadQueues: 1, WriteQueues: 1, Perm: 6, MasterId: 1,
			Replicas: []*pb.ReplicaInfo{{Id: 1, GrpcAddress: addr, Master: true}}})
	}
	return resp, nil
}

func serve(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go s.Serve(l)
	t.Cleanup(s.GracefulStop) // after the held send's handler returns
	return l.Addr().String()
}

// A send whose try timed out (it may have been stored) is tried again on
// the same queue, where the broker can tell a retry from a new message;
// with WithIdempotentRetries(false), on the other group, as RocketMQ's
// producer does.
func TestASendWithAnUnknownOutcomeIsRetriedOnItsQueue(t *testing.T) {
	for _, same := range []bool{true, false} {
		var held atomic.Pointer[recordingBroker]
		a := &recordingBroker{group: "broker-a", held: &held}
		b := &recordingBroker{group: "broker-b", held: &held}
		routes := &routeServer{groups: map[string]string{
			"broker-a": serve(t, func(s *grpc.Server) { pb.RegisterBrokerServer(s, a) }),
			"broker-b": serve(t, func(s *grpc.Server) { pb.RegisterBrokerServer(s, b) }),
		}}
		ns := serve(t, func(s *grpc.Server) { pb.RegisterNameServerServer(s, routes) })
		p, err := NewProducer(WithNameServers(ns), WithLogger(quiet), WithAttemptTimeout(100*time.Millisecond),
			WithFaultIsolation(0), WithIdempotentRetries(same))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		r, err := p.Send(context.Background(), &Message{Topic: "t", Body: []byte("x")})
		p.Shutdown()
		if err != nil {
			t.Fatal(err)
		}
		first, other := held.Load(), a
		if first == a {
			other = b
		}
		switch {
		case same && (first.sent.Load() != 2 || other.sent.Load() != 0 || r.Queue.Group != first.group):
			t.Errorf("idempotent retries: %s got %d tries, %s %d; acked by %s", first.group, first.sent.Load(), other.group, other.sent.Load(), r.Queue.Group)
		case !same && (first.sent.Load() != 1 || other.sent.Load() != 1 || r.Queue.Group != other.group):
			t.Errorf("retries elsewhere: %s got %d tries, %s %d; acked by %s", first.group, first.sent.Load(), other.group, other.sent.Load(), r.Queue.Group)
		}
	}
}
