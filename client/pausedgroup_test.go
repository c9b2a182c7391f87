package client

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/cluster/pb"
)

// A group whose writes are paused (its Raft log moving into the
// commitlog) answers WRITES_PAUSED and stores nothing: a producer sends
// to the other group, idempotent retries on (the default) or not. Taking
// the refusal for an unknown outcome kept the send on the paused group's
// queue until it failed.
func TestSendsGoAroundAPausedGroup(t *testing.T) {
	c := newCluster(t, 2, 1, nil)
	c.createTopic("around", 2)
	paused := c.brokers["broker-a"][c.master("broker-a")]
	conn, err := grpc.NewClient(paused.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pb.NewBrokerClient(conn).MoveRaftLog(context.Background(), &pb.MoveRaftLogRequest{}); err != nil {
		t.Fatal(err)
	}
	for _, idempotent := range []bool{true, false} {
		p := c.producer(WithIdempotentRetries(idempotent))
		for i := range 20 {
			res, err := p.Send(context.Background(), &Message{Topic: "around", Body: []byte(bodyOf(i))})
			if err != nil {
				t.Fatalf("idempotent retries %v: send %d: %v", idempotent, i, err)
			}
			if res.Queue.Group != "broker-b" {
				t.Fatalf("idempotent retries %v: send %d stored on %s, whose writes are paused", idempotent, i, res.Queue.Group)
			}
		}
		p.Shutdown()
	}
}
