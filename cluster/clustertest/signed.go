package clustertest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/raftmq/raftmq/cluster/pb"
)

// AccessKey is a key of the test's policy.
type AccessKey struct{ ID, Secret string }

// Method is one method of a service, called by name with a zero request:
// what access control decides needs no more.
type Method struct {
	Name            string // full method
	Stream          bool
	newReq, newResp func() proto.Message
}

// Methods are every method of the contract's service (Broker,
// NameServer).
func Methods(t testing.TB, service string) []Method {
	t.Helper()
	svc := pb.File_raftmq_proto.Services().ByName(protoreflect.Name(service))
	if svc == nil {
		t.Fatalf("no service %s in the contract", service)
	}
	newOf := func(d protoreflect.MessageDescriptor) func() proto.Message {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
		if err != nil {
			t.Fatal(err)
		}
		return func() proto.Message { return mt.New().Interface() }
	}
	var out []Method
	for i := 0; i < svc.Methods().Len(); i++ {
		m := svc.Methods().Get(i)
		out = append(out, Method{Name: "/" + string(svc.FullName()) + "/" + string(m.Name()), Stream: m.IsStreamingServer(),
			newReq: newOf(m.Input()), newResp: newOf(m.Output())})
	}
	return out
}

// Call invokes m with req on conn (a stream: until its first response;
// a send stream's answer carrying a status is that status's error).
func (m Method) Call(ctx context.Context, conn *grpc.ClientConn, req proto.Message) error {
	if !m.Stream {
		return conn.Invoke(ctx, m.Name, req, m.newResp())
	}
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, m.Name)
	if err != nil {
		return err
	}
	if err := s.SendMsg(req); err != nil {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	resp := m.newResp()
	if err := s.RecvMsg(resp); err != nil {
		return err
	}
	if a, ok := resp.(*pb.SendStreamResponse); ok {
		return a.Err()
	}
	return nil
}

// Signed is ctx carrying a request signature made by hand: with k, for
// method and resource, over req, at ts with nonce.
func Signed(ctx context.Context, k AccessKey, method, resource string, req proto.Message, ts time.Time, nonce string) context.Context {
	d, err := pb.BodyDigest(req)
	if err != nil {
		panic(err)
	}
	millis := strconv.FormatInt(ts.UnixMilli(), 10)
	return metadata.AppendToOutgoingContext(ctx, pb.MetaAccessKey, k.ID, pb.MetaTimestamp, millis, pb.MetaNonce, nonce,
		pb.MetaSignature, pb.Signature([]byte(k.Secret), k.ID, method, resource, d, millis, nonce))
}

// CheckSignedRequests holds every method of service, served on conn (TLS,
// no client certificate) by the node whose identity is resource, to the
// rules of signed requests. Signed by admin with a wrong secret, with an
// unknown key, for another method or another node, over another body,
// stale, from the future, or with a malformed nonce: Unauthenticated.
// Signed by user, whose rights name no empty topic or group: PermissionDenied.
// Signed validly by admin: served (any answer but those two), and that
// same request replayed: Unauthenticated. state describes the node; no
// refused request may change it.
func CheckSignedRequests(t *testing.T, conn *grpc.ClientConn, service, resource string, admin, user AccessKey, state func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	session := [16]byte{0xab}
	n := uint64(0)
	nonce := func() string { n++; return pb.FormatNonce(session, n) }
	before := state()
	now := time.Now
	for _, m := range Methods(t, service) {
		req := m.newReq()
		for what, c := range map[string]struct {
			ctx  context.Context
			code codes.Code
		}{
			"wrong secret":      {Signed(ctx, AccessKey{admin.ID, admin.Secret + "x"}, m.Name, resource, req, now(), nonce()), codes.Unauthenticated},
			"unknown key":       {Signed(ctx, AccessKey{"mallory-key", admin.Secret}, m.Name, resource, req, now(), nonce()), codes.Unauthenticated},
			"another method":    {Signed(ctx, admin, m.Name+"Other", resource, req, now(), nonce()), codes.Unauthenticated},
			"another node":      {Signed(ctx, admin, m.Name, resource+"0", req, now(), nonce()), codes.Unauthenticated},
			"another body":      {Signed(ctx, admin, m.Name, resource, &pb.CreateTopicRequest{Topic: &pb.TopicConfig{Name: "x"}}, now(), nonce()), codes.Unauthenticated},
			"stale":             {Signed(ctx, admin, m.Name, resource, req, now().Add(-time.Hour), nonce()), codes.Unauthenticated},
			"from the future":   {Signed(ctx, admin, m.Name, resource, req, now().Add(time.Hour), nonce()), codes.Unauthenticated},
			"bad nonce":         {Signed(ctx, admin, m.Name, resource, req, now(), "1"), codes.Unauthenticated},
			"without the right": {Signed(ctx, user, m.Name, resource, req, now(), nonce()), codes.PermissionDenied},
		} {
			if err := m.Call(c.ctx, conn, req); status.Code(err) != c.code {
				t.Errorf("%s, %s: %v, want %v", m.Name, what, err, c.code)
			}
		}
	}
	if after := state(); after != before {
		t.Fatalf("refused signed requests changed the node: %s -> %s", before, after)
	}
	for _, m := range Methods(t, service) {
		req := m.newReq()
		signed := Signed(ctx, admin, m.Name, resource, req, now(), nonce())
		// A valid stream may wait for its first answer (a watch): it got
		// past access control if it is still waiting.
		first, cancel := context.WithTimeout(signed, time.Second)
		err := m.Call(first, conn, req)
		cancel()
		if code := status.Code(err); code == codes.Unauthenticated || code == codes.PermissionDenied {
			t.Fatalf("%s signed by the admin: %v", m.Name, err)
		}
		before := state()
		if err := m.Call(signed, conn, req); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s replayed: %v, want Unauthenticated", m.Name, err)
		}
		if after := state(); after != before {
			t.Fatalf("%s replayed changed the node: %s -> %s", m.Name, before, after)
		}
	}
}
