package client

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
)

// answeringBroker stands in for one replica of a group in this package's
// unit test of the producer's redirects: it refuses every send with err.
type answeringBroker struct {
	pb.UnimplementedBrokerServer
	err  func() error
	sent atomic.Int32
}

func (b *answeringBroker) SendMessage(context.Context, *pb.SendMessageRequest) (*pb.SendMessageResponse, error) {
	b.sent.Add(1)
	return nil, b.err()
}

// noMasterRoutes routes topic "t" to one group of one queue whose only
// replica it knows is a slave, and no master: as the name servers answer
// before they hear the master's claim.
type noMasterRoutes struct {
	pb.UnimplementedNameServerServer
	slave string
}

func (n *noMasterRoutes) GetRoute(_ context.Context, req *pb.GetRouteRequest) (*pb.RouteResponse, error) {
	return &pb.RouteResponse{Topic: req.Topic, Groups: []*pb.GroupRoute{{Group: "broker-a", ReadQueues: 1, WriteQueues: 1, Perm: 6,
		Replicas: []*pb.ReplicaInfo{{Id: 2, GrpcAddress: n.slave}}}}}, nil
}

// A slave's NOT_LEADER naming the master is a hop to it, not an answer
// of its own: every try reaches the master, and a send that fails ends
// on what the master said. Counted as a try, the hop used up the last
// one and the send failed with the slave's NOT_LEADER, hiding the
// master's WRITES_PAUSED (seen in e2e's TestMoveRaftLogThroughTheCLI
// while the move's command answered early).
func TestASendFailsWithTheMastersAnswerNotAHops(t *testing.T) {
	master := &answeringBroker{err: func() error {
		return pb.StatusError(codes.Unavailable, pb.ErrorReason_WRITES_PAUSED, "writes are paused while its Raft log moves", nil)
	}}
	masterAddr := serve(t, func(s *grpc.Server) { pb.RegisterBrokerServer(s, master) })
	slave := &answeringBroker{err: func() error {
		return pb.StatusError(codes.FailedPrecondition, pb.ErrorReason_NOT_LEADER, "not the master", map[string]string{"leader": masterAddr})
	}}
	slaveAddr := serve(t, func(s *grpc.Server) { pb.RegisterBrokerServer(s, slave) })
	ns := serve(t, func(s *grpc.Server) { pb.RegisterNameServerServer(s, &noMasterRoutes{slave: slaveAddr}) })
	const retries = 2
	p, err := NewProducer(WithNameServers(ns), WithLogger(quiet), WithRetries(retries), WithFaultIsolation(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	_, err = p.Send(context.Background(), &Message{Topic: "t", Body: []byte("x")})
	if reason, _ := pb.ReasonOf(err); reason != pb.ErrorReason_WRITES_PAUSED {
		t.Fatalf("the send failed with %v (reason %v), not the master's WRITES_PAUSED", err, reason)
	}
	if got := master.sent.Load(); got != retries+1 {
		t.Errorf("the master got %d tries, want %d: one a try, each after a hop", got, retries+1)
	}
}
