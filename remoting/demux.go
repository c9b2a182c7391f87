package remoting

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// Demux serves two protocols on one port: a connection whose first byte
// is 'P' (HTTP/2's client preface, "PRI * HTTP/2.0...", which every gRPC
// client sends first) goes to the gRPC listener, any other to the
// remoting server. A remoting frame begins with its length, whose high
// byte is 0 for every frame under 16 MiB, so the two never meet. Users
// then point RocketMQ clients at the address they already use.
//
// The first byte is read on the connection's own goroutine, with a
// deadline, so a client that connects and sends nothing holds up no other.
//
// With TLS (ShareTLS) the demux does the handshake, on the same goroutine
// under the same deadline, and the first byte it reads is the first one
// the TLS connection carries: both protocols' clients begin with a TLS
// ClientHello, and only what follows tells them apart. The gRPC server
// then takes the connections as they are (HandshakenTLS), and RocketMQ's
// clients (UseTls) get TLS on the address they already use.
type Demux struct {
	lis      net.Listener
	remoting *Server
	grpc     *chanListener
	wait     time.Duration
	tls      *tls.Config // nil: plaintext
}

// NewDemux splits lis between the returned gRPC listener (give it to
// grpc.Server.Serve) and remoting; call Serve to start.
func NewDemux(lis net.Listener, remoting *Server) *Demux {
	return &Demux{lis: lis, remoting: remoting, wait: 10 * time.Second,
		grpc: &chanListener{addr: lis.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}}
}

// Share runs a Demux of lis between gRPC and srv, its accept loop counted
// in wg, and returns the listener to serve gRPC on. Closing lis ends the
// loop.
func Share(lis net.Listener, srv *Server, wg *sync.WaitGroup) net.Listener {
	return NewDemux(lis, srv).serveIn(wg)
}

// serveIn runs d's accept loop, counted in wg, and returns the gRPC
// listener.
func (d *Demux) serveIn(wg *sync.WaitGroup) net.Listener {
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.Serve()
	}()
	return d.GRPC()
}

// ShareTLS is Share for a listener whose every connection speaks TLS with
// cfg: give the gRPC server HandshakenTLS as its credentials. Plaintext
// clients fail the handshake and are closed.
func ShareTLS(lis net.Listener, cfg *tls.Config, srv *Server, wg *sync.WaitGroup) net.Listener {
	cfg = cfg.Clone()
	// gRPC's clients insist on HTTP/2 negotiated by ALPN; RocketMQ's
	// offer no protocol, and get none.
	cfg.NextProtos = append([]string{"h2"}, cfg.NextProtos...)
	d := NewDemux(lis, srv)
	d.tls = cfg
	return d.serveIn(wg)
}

// GRPC is the listener of the gRPC connections.
func (d *Demux) GRPC() net.Listener { return d.grpc }

// Serve accepts until lis fails (it is closed), then closes the gRPC
// listener.
func (d *Demux) Serve() error {
	defer d.grpc.Close()
	for {
		conn, err := d.lis.Accept()
		if err != nil {
			return err
		}
		go d.route(conn)
	}
}

func (d *Demux) route(conn net.Conn) {
	var tc *tls.Conn
	if d.tls != nil {
		tc = tls.Server(conn, d.tls)
		ctx, cancel := context.WithTimeout(context.Background(), d.wait)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			conn.Close()
			return
		}
		conn = tc
	}
	conn.SetReadDeadline(time.Now().Add(d.wait))
	r := bufio.NewReader(conn)
	first, err := r.Peek(1)
	conn.SetReadDeadline(time.Time{})
	if err != nil {
		conn.Close()
		return
	}
	peeked := &peekedConn{Conn: conn, r: r, tls: tc}
	if first[0] == 'P' {
		select {
		case d.grpc.conns <- peeked:
		case <-d.grpc.done:
			conn.Close()
		}
		return
	}
	d.remoting.ServeConn(peeked)
}

// peekedConn reads what was peeked first.
type peekedConn struct {
	net.Conn
	r   *bufio.Reader
	tls *tls.Conn // the connection under it, when it speaks TLS
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// tlsState is the TLS state of a connection Demux handed out, nil for a
// plaintext one.
func tlsState(c net.Conn) *tls.ConnectionState {
	p, ok := c.(*peekedConn)
	if !ok || p.tls == nil {
		return nil
	}
	st := p.tls.ConnectionState()
	return &st
}

// HandshakenTLS are the gRPC server's credentials behind ShareTLS: the
// handshake is done, and the connection's TLS state is the call's
// AuthInfo, as gRPC's own TLS credentials give it (so a verified client
// certificate names the caller just the same).
func HandshakenTLS() credentials.TransportCredentials { return handshaken{} }

type handshaken struct{}

func (handshaken) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	st := tlsState(c)
	if st == nil {
		c.Close()
		return nil, nil, errors.New("remoting: a connection without TLS behind ShareTLS")
	}
	return c, credentials.TLSInfo{State: *st, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (handshaken) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("remoting: HandshakenTLS is for servers")
}

func (handshaken) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3"}
}
func (h handshaken) Clone() credentials.TransportCredentials { return h }
func (handshaken) OverrideServerName(string) error           { return nil }

// chanListener hands out the connections Demux gives it.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
