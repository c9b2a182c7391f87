package broker

import (
	"context"
	"crypto/tls"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/raftmq/raftmq/cluster/pb"
)

// The replica's identity, which signatures name.
const replicaResource = "raftmq://raftmq/broker/broker-a/1"

// brokerMethod is one method of the Broker service, called by name with
// a zero request: what access control decides does not need more.
type brokerMethod struct {
	name            string // full method
	stream          bool
	newReq, newResp func() proto.Message
}

func brokerMethods(t *testing.T) []brokerMethod {
	t.Helper()
	svc := pb.File_raftmq_proto.Services().ByName("Broker")
	newOf := func(d protoreflect.MessageDescriptor) func() proto.Message {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
		if err != nil {
			t.Fatal(err)
		}
		return func() proto.Message { return mt.New().Interface() }
	}
	var out []brokerMethod
	for i := 0; i < svc.Methods().Len(); i++ {
		m := svc.Methods().Get(i)
		out = append(out, brokerMethod{name: "/" + string(svc.FullName()) + "/" + string(m.Name()), stream: m.IsStreamingServer(),
			newReq: newOf(m.Input()), newResp: newOf(m.Output())})
	}
	if len(out) != len(pb.Broker_ServiceDesc.Methods)+len(pb.Broker_ServiceDesc.Streams) {
		t.Fatalf("%d methods in the descriptor, %d in the service", len(out), len(pb.Broker_ServiceDesc.Methods)+len(pb.Broker_ServiceDesc.Streams))
	}
	return out
}

// call invokes m with req on conn (a stream: its first response).
func (m brokerMethod) call(ctx context.Context, conn *grpc.ClientConn, req proto.Message) error {
	if !m.stream {
		return conn.Invoke(ctx, m.name, req, m.newResp())
	}
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, m.name)
	if err != nil {
		return err
	}
	if err := s.SendMsg(req); err != nil {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	return s.RecvMsg(m.newResp())
}

// signedAs is ctx carrying a request signature made by hand: key and
// secret, for method and resource, over req, at ts with nonce.
func signedAs(ctx context.Context, key, secret, method, resource string, req proto.Message, ts time.Time, nonce string) context.Context {
	d, err := pb.BodyDigest(req)
	if err != nil {
		panic(err)
	}
	millis := strconv.FormatInt(ts.UnixMilli(), 10)
	return grpcmd.AppendToOutgoingContext(ctx, pb.MetaAccessKey, key, pb.MetaTimestamp, millis, pb.MetaNonce, nonce,
		pb.MetaSignature, pb.Signature([]byte(secret), key, method, resource, d, millis, nonce))
}

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

// For every Broker method, the admin RPCs among them: a request signed
// with a wrong secret, for another method or another node, over another
// body, stale or from the future is refused as unauthenticated, one by a
// key whose user lacks the right is denied, and a valid one replayed is
// refused; none of them changes the replica.
func TestSignedRequestsRefusedWhenWrongReplayedOrStale(t *testing.T) {
	g := newACLGroup(t)
	waitFor(t, 10*time.Second, g.brokers[0].IsMaster)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := g.as(userID("root"))
	if _, err := root.CreateTopic(ctx, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "orders", ReadQueues: 1, WriteQueues: 1}}); err != nil {
		t.Fatal(err)
	}
	conn := g.dialTLS()
	state := func() string {
		d, err := root.DescribeBroker(ctx, &pb.DescribeBrokerRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatUint(d.AppliedIndex, 10) + "/" + strconv.FormatInt(d.CommitlogMaxOffset, 10) + "/" + strconv.Itoa(len(d.Topics))
	}
	const rootKey, rootSecret = "root-key", "root-secret-0123456789"
	nonce := func(i int) string { return pb.FormatNonce([16]byte{0xab}, uint64(i)) }
	before := state()
	n := 0
	for _, m := range brokerMethods(t) {
		req := m.newReq()
		admin := brokerAccess[m.name](req).Admin
		for what, c := range map[string]struct {
			ctx  context.Context
			code codes.Code
		}{
			"wrong secret":    {signedAs(ctx, rootKey, "not-the-secret-0123", m.name, replicaResource, req, time.Now(), nonce(n+1)), codes.Unauthenticated},
			"unknown key":     {signedAs(ctx, "mallory-key", rootSecret, m.name, replicaResource, req, time.Now(), nonce(n+2)), codes.Unauthenticated},
			"another method":  {signedAs(ctx, rootKey, rootSecret, m.name+"Other", replicaResource, req, time.Now(), nonce(n+3)), codes.Unauthenticated},
			"another node":    {signedAs(ctx, rootKey, rootSecret, m.name, "raftmq://raftmq/broker/broker-a/2", req, time.Now(), nonce(n+4)), codes.Unauthenticated},
			"another body":    {signedAs(ctx, rootKey, rootSecret, m.name, replicaResource, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "x"}}, time.Now(), nonce(n+5)), codes.Unauthenticated},
			"stale":           {signedAs(ctx, rootKey, rootSecret, m.name, replicaResource, req, time.Now().Add(-6*time.Minute), nonce(n+6)), codes.Unauthenticated},
			"from the future": {signedAs(ctx, rootKey, rootSecret, m.name, replicaResource, req, time.Now().Add(6*time.Minute), nonce(n+7)), codes.Unauthenticated},
			"bad nonce":       {signedAs(ctx, rootKey, rootSecret, m.name, replicaResource, req, time.Now(), "1"), codes.Unauthenticated},
			// app has rights on orders and g1 only: an empty request names neither.
			"without the right": {signedAs(ctx, "app-key", "app-secret-0123456789", m.name, replicaResource, req, time.Now(), nonce(n+8)), codes.PermissionDenied},
		} {
			if err := m.call(c.ctx, conn, req); status.Code(err) != c.code {
				t.Errorf("%s (admin %v), %s: %v, want %v", m.name, admin, what, err, c.code)
			}
		}
		n += 10
	}
	if after := state(); after != before {
		t.Fatalf("refused signed requests changed the replica: applied/commitlog/topics %s -> %s", before, after)
	}
	// Valid once, refused when replayed: the replay changes nothing.
	for _, m := range brokerMethods(t) {
		req := m.newReq()
		n++
		signed := signedAs(ctx, rootKey, rootSecret, m.name, replicaResource, req, time.Now(), nonce(n))
		if err := m.call(signed, conn, req); status.Code(err) == codes.Unauthenticated || status.Code(err) == codes.PermissionDenied {
			t.Fatalf("%s signed by the admin: %v", m.name, err)
		}
		before := state()
		if err := m.call(signed, conn, req); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s replayed: %v, want Unauthenticated", m.name, err)
		}
		if after := state(); after != before {
			t.Fatalf("%s replayed changed the replica: %s -> %s", m.name, before, after)
		}
	}
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
