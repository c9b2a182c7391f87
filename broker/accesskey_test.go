package broker

import (
	"context"
	"crypto/tls"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
)

// The replica's identity, which signatures name.
const replicaResource = "raftmq://raftmq/broker/broker-a/1"

// dialTLS is a TLS connection to the replica with no client certificate,
// and opts.
func (g *aclGroup) dialTLS(opts ...grpc.DialOption) *grpc.ClientConn {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true} // who the server is does not matter here; its identity is signed
	conn, err := grpc.NewClient(g.cfgs[0].GRPCAddr, append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, opts...)...)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { conn.Close() })
	return conn
}

// For every Broker method, the admin RPCs among them: wrong, stale,
// replayed and over-permission signed requests are refused and change
// nothing (clustertest.CheckSignedRequests).
func TestSignedRequestsRefusedWhenWrongReplayedOrStale(t *testing.T) {
	g := newACLGroup(t)
	waitFor(t, 10*time.Second, g.brokers[0].IsMaster)
	ctx := context.Background()
	root := g.as(userID("root"))
	if _, err := root.CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "orders", ReadQueues: 1, WriteQueues: 1}}); err != nil {
		t.Fatal(err)
	}
	if n := len(clustertest.Methods(t, "Broker")); n != len(pb.Broker_ServiceDesc.Methods)+len(pb.Broker_ServiceDesc.Streams) {
		t.Fatalf("%d methods in the descriptor, %d in the service", n, len(pb.Broker_ServiceDesc.Methods)+len(pb.Broker_ServiceDesc.Streams))
	}
	// What a request could change: messages, topics, subscription
	// groups, offsets. (Not the applied index: Raft's own entries, and
	// when it counts them applied, move it on their own.)
	state := func() string {
		d, err := root.DescribeBroker(ctx, &pb.DescribeBrokerRequest{})
		if err != nil {
			t.Fatal(err)
		}
		gs, err := root.ListSubscriptionGroups(ctx, &pb.ListSubscriptionGroupsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		off, err := root.QueryConsumerOffset(ctx, &pb.QueryConsumerOffsetRequest{ConsumerGroup: "g1", Topic: "orders"})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("commitlog %d, topics %d, groups %d, g1's offset %d", d.CommitlogMaxOffset, len(d.Topics), len(gs.Groups), off.Offset)
	}
	clustertest.CheckSignedRequests(t, g.dialTLS(), "Broker", replicaResource,
		clustertest.AccessKey{ID: "root-key", Secret: "root-secret-0123456789"}, clustertest.AccessKey{ID: "app-key", Secret: "app-secret-0123456789"}, state)
}

// The signer of the contract (pb.AccessKey) as the SDK and the CLI use it:
// each user gets its rights, a wrong secret nothing, and a stream signs
// its request when told it (pb.WithStreamRequest).
func TestAccessKeySignerGetsTheUsersRights(t *testing.T) {
	g := newACLGroup(t)
	waitFor(t, 10*time.Second, g.brokers[0].IsMaster)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	signer := func(key, secret string) pb.BrokerClient {
		k, err := pb.NewAccessKey(key, secret)
		if err != nil {
			t.Fatal(err)
		}
		return pb.NewBrokerClient(g.dialTLS(k.DialOptions()...))
	}
	root, app := signer("root-key", "root-secret-0123456789"), signer("app-key", "app-secret-0123456789")
	if _, err := root.CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "orders", ReadQueues: 1, WriteQueues: 1}}); err != nil {
		t.Fatalf("the admin's key creating a topic: %v", err)
	}
	for i := 0; i < 3; i++ { // one session, counters 1, 2, 3 ...
		if _, err := app.SendMessage(ctx, &pb.SendMessageRequest{Topic: "orders", Messages: []*pb.Message{{Body: []byte("signed")}}}); err != nil {
			t.Fatalf("app's key publishing to orders: %v", err)
		}
	}
	if _, err := app.CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "evil", ReadQueues: 1, WriteQueues: 1}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("app's key creating a topic: %v", err)
	}
	if _, err := signer("root-key", "wrong-secret-0123456789").ListTopics(ctx, &pb.ListTopicsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a wrong secret: %v", err)
	}
	req := &pb.CopyCommitlogRequest{}
	sctx, err := pb.WithStreamRequest(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	s, err := root.CopyCommitlog(sctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatalf("a signed stream: %v", err)
	}
	s, err = root.CopyCommitlog(ctx, &pb.CopyCommitlogRequest{FromOffset: 1}) // not told its request
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a stream whose request was not signed: %v", err)
	}
}
