package remoting

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// sharedPort serves gRPC (the health service) and remoting (code 105
// echoing its topic) on one port, as name servers and brokers do.
func sharedPort(t *testing.T, cfg ServerConfig) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Handlers = map[int32]Handler{105: func(_ context.Context, req *Command) *Command {
		return &Command{Code: CodeSuccess, Body: []byte(req.ExtFields["topic"])}
	}}
	cfg.Logger = quiet
	rs := NewServer(cfg)
	d := NewDemux(lis, rs)
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, health.NewServer())
	done := make(chan struct{}, 2)
	go func() { d.Serve(); done <- struct{}{} }()
	go func() { g.Serve(d.GRPC()); done <- struct{}{} }()
	t.Cleanup(func() {
		g.Stop()
		lis.Close()
		rs.Close()
		<-done
		<-done
	})
	return lis.Addr().String()
}

func call(t *testing.T, conn net.Conn, r *bufio.Reader, req *Command) *Command {
	t.Helper()
	frame, err := req.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := ReadCommand(r, DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// One port answers both: a gRPC call, and remoting requests, each with
// its opaque and the response flag; an unknown code gets RocketMQ's "not
// supported" answer, and the connection goes on.
func TestOnePortServesGRPCAndRemoting(t *testing.T) {
	addr := sharedPort(t, ServerConfig{})
	checkHealth(t, addr, insecure.NewCredentials())
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	resp := call(t, conn, r, &Command{Code: 105, Language: "GO", Opaque: 41, ExtFields: map[string]string{"topic": "orders"}})
	if resp.Code != CodeSuccess || resp.Opaque != 41 || !resp.IsResponse() || string(resp.Body) != "orders" {
		t.Fatalf("route answer %+v", resp)
	}
	resp = call(t, conn, r, &Command{Code: 999, Opaque: 42})
	if resp.Code != CodeNotSupported || resp.Opaque != 42 || resp.Remark != "request code 999 not supported" {
		t.Fatalf("unknown code answer %+v", resp)
	}
	if resp = call(t, conn, r, &Command{Code: 105, Opaque: 43, ExtFields: map[string]string{"topic": "again"}}); string(resp.Body) != "again" {
		t.Fatalf("after an unknown code %+v", resp)
	}
	// A one-way request is handled and not answered.
	oneway, err := (&Command{Code: 105, Opaque: 44, Flag: FlagOneway}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(oneway); err != nil {
		t.Fatal(err)
	}
	if resp = call(t, conn, r, &Command{Code: 105, Opaque: 45}); resp.Opaque != 45 {
		t.Fatalf("after a one-way request, answer %+v", resp)
	}
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if extra, err := ReadCommand(r, DefaultMaxFrame); err == nil {
		t.Fatalf("a one-way request answered: %+v", extra)
	}
}

// A malformed frame, or one over the cap, closes its connection (and only
// it), before the server allocates what a length claims.
func TestMalformedFramesCloseTheConnection(t *testing.T) {
	addr := sharedPort(t, ServerConfig{MaxFrame: 1 << 10})
	for name, bytes := range map[string][]byte{
		"over the cap":     binary.BigEndian.AppendUint32(nil, 1<<30),
		"unknown encoding": append(binary.BigEndian.AppendUint32(nil, 6), 7, 0, 0, 2, '{', '}'),
		"not JSON":         append(binary.BigEndian.AppendUint32(nil, 7), 0, 0, 0, 3, 'x', 'y', 'z'),
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(bytes)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("%s: read %d bytes, %v; want the connection closed", name, n, err)
		}
		conn.Close()
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if resp := call(t, conn, bufio.NewReader(conn), &Command{Code: 105, Opaque: 1, ExtFields: map[string]string{"topic": "t"}}); resp.Code != CodeSuccess {
		t.Fatalf("a good connection after the bad ones: %+v", resp)
	}
}

// A request still in progress when its client goes away is told so (its
// context ends: a held pull stops waiting), and Close does not wait for
// it to finish on its own.
func TestAGoneClientsRequestsEnd(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	s := NewServer(ServerConfig{Logger: quiet, Handlers: map[int32]Handler{11: func(ctx context.Context, _ *Command) *Command {
		<-ctx.Done()
		close(ended)
		return &Command{Code: CodeSystemError}
	}}})
	go s.Serve(lis)
	defer func() { lis.Close(); s.Close() }()
	conn, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	frame, _ := (&Command{Code: 11, Opaque: 1}).Encode(nil)
	conn.Write(frame)
	conn.Close() // the server still reads the frame sent before, then the end

	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("a request of a closed connection still waits")
	}
}

// A handler's connection pushes requests to its client later (code 40):
// the client reads a request frame with the push's code, an opaque of the
// server's and no response flag, while its own requests are answered as
// before; the connection's end is reported once its requests returned,
// and a push to it then is dropped.
func TestPushesReachTheClientAndCloseIsReported(t *testing.T) {
	closed := make(chan *Conn, 1)
	conn, r, c := heartbeatedConn(t, func(c *Conn) { closed <- c })
	c.Push(&Command{Code: 40, ExtFields: map[string]string{"consumerGroup": "g"}})
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	push, err := ReadCommand(r, DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	if push.Code != 40 || push.IsResponse() || push.ExtFields["consumerGroup"] != "g" || push.Opaque == 0 {
		t.Fatalf("push %+v", push)
	}
	// The client's answer to the push is read and ignored: the connection
	// goes on.
	answer, _ := (&Command{Code: CodeSuccess, Opaque: push.Opaque, Flag: FlagResponse}).Encode(nil)
	conn.Write(answer)
	if resp := call(t, conn, r, &Command{Code: 34, Opaque: 8}); resp.Opaque != 8 {
		t.Fatalf("after the push's answer %+v", resp)
	}
	select {
	case <-closed:
		t.Fatal("reported closed while open")
	default:
	}
	conn.Close()
	select {
	case got := <-closed:
		if got != c {
			t.Fatal("another connection reported closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a closed connection not reported")
	}
	c.Push(&Command{Code: 40}) // dropped: nothing to write to, nothing left running (goleak)
}

// Pushes to a client that reads nothing pile up no further than
// maxPendingPushes writers: the rest are dropped, not queued.
func TestPushesToAClientThatDoesNotReadAreBounded(t *testing.T) {
	_, _, c := heartbeatedConn(t, nil)
	before := runtime.NumGoroutine()
	big := &Command{Code: 40, Remark: strings.Repeat("x", 256<<10)} // the socket's buffers fill after a few
	for i := 0; i < 200; i++ {
		c.Push(big)
	}
	if n := runtime.NumGoroutine() - before; n > maxPendingPushes {
		t.Fatalf("%d goroutines more after 200 pushes nobody reads, want at most %d", n, maxPendingPushes)
	}
}

// heartbeatedConn serves one connection (onClose, if set, told of its
// end) and sends a heartbeat (code 34) on it: the client's side, its
// reader, and the server's Conn as the heartbeat's handler found it.
func heartbeatedConn(t *testing.T, onClose func(*Conn)) (net.Conn, *bufio.Reader, *Conn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan *Conn, 8)
	s := NewServer(ServerConfig{Logger: quiet, OnClose: onClose, Handlers: map[int32]Handler{34: func(ctx context.Context, _ *Command) *Command {
		conns <- ConnOf(ctx)
		return &Command{Code: CodeSuccess}
	}}})
	go s.Serve(lis)
	t.Cleanup(func() { lis.Close(); s.Close() })
	conn, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := bufio.NewReader(conn)
	if resp := call(t, conn, r, &Command{Code: 34, Opaque: 7}); resp.Code != CodeSuccess || resp.Opaque != 7 {
		t.Fatalf("heartbeat answer %+v", resp)
	}
	c := <-conns
	if c == nil {
		t.Fatal("no connection in the handler's context")
	}
	return conn, r, c
}

// checkHealth makes a gRPC health check to addr with creds.
func checkHealth(t *testing.T, addr string, creds credentials.TransportCredentials) {
	t.Helper()
	gc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(gc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("gRPC health check on %s: %v", addr, err)
	}
}
