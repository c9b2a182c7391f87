package remoting

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
)

// selfSigned is a certificate for 127.0.0.1 and the pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// healthPeer is a health service that records the AuthInfo of its call.
type healthPeer struct {
	healthpb.HealthServer
	mu   sync.Mutex
	auth credentials.AuthInfo
}

func (h *healthPeer) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if p, ok := peer.FromContext(ctx); ok {
		h.mu.Lock()
		h.auth = p.AuthInfo
		h.mu.Unlock()
	}
	return h.HealthServer.Check(ctx, req)
}

// With TLS, one port still answers both: gRPC over TLS (its call seeing
// the connection's TLS state, as with gRPC's own TLS credentials) and
// remoting over TLS (what RocketMQ's UseTls clients speak, with the
// connection's TLS state in its handler's context); a plaintext
// remoting client is closed.
func TestOnePortServesBothOverTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sawTLS := make(chan bool, 1)
	rs := NewServer(ServerConfig{Logger: quiet, Handlers: map[int32]Handler{105: func(ctx context.Context, req *Command) *Command {
		sawTLS <- ConnOf(ctx).TLS() != nil
		return &Command{Code: CodeSuccess, Body: []byte(req.ExtFields["topic"])}
	}}})
	var wg sync.WaitGroup
	grpcLis := ShareTLS(lis, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}, rs, &wg)
	g := grpc.NewServer(grpc.Creds(HandshakenTLS()))
	hp := &healthPeer{HealthServer: health.NewServer()}
	healthpb.RegisterHealthServer(g, hp)
	wg.Add(1)
	go func() { defer wg.Done(); g.Serve(grpcLis) }()
	defer func() { g.Stop(); lis.Close(); rs.Close(); wg.Wait() }()
	addr := lis.Addr().String()

	checkHealth(t, addr, credentials.NewTLS(&tls.Config{RootCAs: pool}))
	hp.mu.Lock()
	info, ok := hp.auth.(credentials.TLSInfo)
	hp.mu.Unlock()
	if !ok || info.State.Version != tls.VersionTLS13 || info.State.NegotiatedProtocol != "h2" {
		t.Fatalf("the gRPC call's AuthInfo %#v, want the TLS 1.3 state with h2", hp.auth)
	}

	tc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) // as RocketMQ's Go client dials
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if resp := call(t, tc, bufio.NewReader(tc), &Command{Code: 105, Opaque: 3, ExtFields: map[string]string{"topic": "secure"}}); resp.Code != CodeSuccess || string(resp.Body) != "secure" {
		t.Fatalf("remoting over TLS: %+v", resp)
	}
	if !<-sawTLS {
		t.Fatal("the handler saw no TLS state")
	}

	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	frame, _ := (&Command{Code: 105, Opaque: 4}).Encode(nil)
	plain.Write(frame)
	plain.SetReadDeadline(time.Now().Add(5 * time.Second))
	// The server answers the non-TLS bytes with at most a TLS alert, then
	// closes: never a remoting answer.
	r := bufio.NewReader(plain)
	if _, err := ReadCommand(r, DefaultMaxFrame); err == nil {
		t.Fatal("a plaintext remoting request answered on a TLS port")
	}
}
