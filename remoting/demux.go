package remoting

import (
	"bufio"
	"net"
	"sync"
	"time"
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
type Demux struct {
	lis      net.Listener
	remoting *Server
	grpc     *chanListener
	wait     time.Duration
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
	d := NewDemux(lis, srv)
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.Serve()
	}()
	return d.GRPC()
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
	conn.SetReadDeadline(time.Now().Add(d.wait))
	r := bufio.NewReader(conn)
	first, err := r.Peek(1)
	conn.SetReadDeadline(time.Time{})
	if err != nil {
		conn.Close()
		return
	}
	peeked := &peekedConn{Conn: conn, r: r}
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
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

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
