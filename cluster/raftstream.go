package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// tlsStream is the Raft transport's stream layer over mutual TLS: it
// accepts and dials only members of this group (a certificate naming
// raftmq://CLUSTER/broker/GROUP/*). hashicorp/raft v1.7.3 obeys any
// AppendEntries or RequestVote with a higher term from whoever reaches the
// port, so without this any process on the network can depose the master
// or pose as a leader.
//
// hashicorp/raft runs Accept in one loop and backs off up to 1 s on each
// error it returns, so the layer never handshakes in Accept and never
// returns a failed handshake from it: each connection is handshaken (under
// handshakeTimeout) on a goroutine of its own, and Accept hands out only
// verified ones (the handoff of Consul's, Nomad's and Vault's Raft layers).
type tlsStream struct {
	lis       net.Listener
	advertise net.Addr
	server    *tls.Config
	client    *tls.Config
	log       *slog.Logger

	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	active sync.WaitGroup // handshakes in progress
}

// handshakeTimeout bounds a Raft peer's TLS handshake (Nomad's 5 s).
const handshakeTimeout = 5 * time.Second

var _ raft.StreamLayer = (*tlsStream)(nil)

func newTLSStream(bind string, advertise net.Addr, t *TLS, group Want, log *slog.Logger) (*tlsStream, error) {
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	s := &tlsStream{
		lis: lis, advertise: advertise, log: log,
		server: t.ServerConfig(group), client: t.ClientConfig(group),
		conns: make(chan net.Conn), done: make(chan struct{}),
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

func (s *tlsStream) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.lis.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			s.log.Warn("raft transport: accept failed", "err", err)
			select {
			case <-s.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		s.active.Add(1)
		go s.handshake(c)
	}
}

func (s *tlsStream) handshake(c net.Conn) {
	defer s.active.Done()
	tc := tls.Server(c, s.server)
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	go func() { // a Close while handshaking ends the handshake
		select {
		case <-s.done:
			c.Close()
		case <-ctx.Done():
		}
	}()
	if err := tc.HandshakeContext(ctx); err != nil {
		s.log.Warn("raft transport: refused a connection", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	select {
	case s.conns <- tc:
	case <-s.done:
		tc.Close()
	}
}

// Accept returns the next verified connection.
func (s *tlsStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Dial connects to a member of the group; the handshake is within timeout.
func (s *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.client}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, "tcp", string(addr))
}

// Close stops accepting and ends handshakes in progress.
func (s *tlsStream) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.lis.Close()
		s.wg.Wait()
		s.active.Wait()
	})
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (s *tlsStream) Addr() net.Addr { return s.advertise }
