package remoting

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftmq/raftmq/internal/defaults"
)

// Response codes (RocketMQ's ResponseCode) the server itself uses.
const (
	CodeSuccess        = 0
	CodeSystemError    = 1
	CodeNotSupported   = 3
	CodeTopicNotExist  = 17
	clientReadDeadline = 2 * time.Minute // the Go client's own idle cut is 120 s
	writeTimeout       = 30 * time.Second
)

// Handler answers one request. The server sets the answer's opaque and
// response flag.
type Handler func(ctx context.Context, req *Command) *Command

// ServerConfig configures a Server; zero fields take the defaults.
type ServerConfig struct {
	// Handlers by request code; a code without one is answered
	// CodeNotSupported ("request code N not supported"), as RocketMQ does.
	Handlers map[int32]Handler
	// MaxFrame caps a frame's length. Default DefaultMaxFrame.
	MaxFrame int
	// MaxInFlight caps the requests one connection has in progress (a
	// long-polled pull holds its slot); past it the connection's next
	// read waits. Default 1024.
	MaxInFlight int
	// OnClose, if set, is called with each connection once it has ended
	// and its requests have returned: RocketMQ's brokers forget the
	// consumers that heartbeated on a closed channel.
	OnClose func(*Conn)
	Logger  *slog.Logger
}

// Conn is one client's connection. A handler finds it in its context
// (ConnOf) to push requests to the client later (Push).
type Conn struct {
	s       *Server
	nc      net.Conn
	tls     *tls.ConnectionState // nil: plaintext; fixed once the handshake is done
	ctx     context.Context      // ends with the connection
	writeMu sync.Mutex
	pushing atomic.Int32 // pushes not yet written
}

// maxPendingPushes bounds the pushes waiting to be written to one
// connection (a client that reads nothing holds them up to writeTimeout
// each): code 40 is a hint, and one of them does what many would, so the
// rest are dropped.
const maxPendingPushes = 4

type connKey struct{}

// ConnOf is the connection a handler's request came on (nil outside a
// handler).
func ConnOf(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}

// TLSOf is the TLS state of the connection a handler's request came on
// (nil for plaintext, or outside a handler).
func TLSOf(ctx context.Context) *tls.ConnectionState {
	if c := ConnOf(ctx); c != nil {
		return c.TLS()
	}
	return nil
}

// TLS is the connection's TLS state (with a client's verified
// certificate, if it gave one), nil when it speaks plaintext.
func (c *Conn) TLS() *tls.ConnectionState { return c.tls }

// write sends one frame; writes of a connection's answers and pushes do
// not interleave. A failed write closes the connection (its reader then
// ends it).
func (c *Conn) write(frame []byte) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.nc.Write(frame); err != nil {
		c.nc.Close()
	}
}

// Push sends cmd to the client as a request (RocketMQ's brokers push code
// 40, "your group's members changed", so). It does not wait for the
// write, nor for an answer, which the server ignores; a connection that
// has ended, a server closing, or maxPendingPushes not yet written drop
// it.
func (c *Conn) Push(cmd *Command) {
	push := *cmd
	push.Flag &^= FlagResponse
	push.Opaque = c.s.opaque.Add(1)
	frame, err := push.Encode(nil)
	if err != nil {
		c.s.cfg.Logger.Error("remoting: push not encodable", "code", cmd.Code, "err", err)
		return
	}
	s := c.s
	s.mu.Lock()
	if s.ctx.Err() != nil || c.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	if c.pushing.Add(1) > maxPendingPushes {
		c.pushing.Add(-1)
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer c.pushing.Add(-1)
		c.write(frame)
	}()
}

// Server serves the remoting protocol on the connections it is given.
type Server struct {
	cfg    ServerConfig
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	opaque atomic.Int32 // pushes' opaques (a client's requests carry its own)
}

// NewServer makes a server; Serve gives it connections.
func NewServer(cfg ServerConfig) *Server {
	defaults.IfNotPositive(&cfg.MaxFrame, DefaultMaxFrame)
	defaults.IfNotPositive(&cfg.MaxInFlight, 1024)
	defaults.IfZero(&cfg.Logger, slog.Default())
	s := &Server{cfg: cfg, conns: map[net.Conn]struct{}{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// Serve accepts connections from lis until it fails or Close.
func (s *Server) Serve(lis net.Listener) error {
	for {
		conn, err := lis.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.ServeConn(conn)
	}
}

// ServeConn serves one connection in the background, whose bytes may
// have been peeked at already (Demux).
func (s *Server) ServeConn(conn net.Conn) {
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		conn.Close()
		return
	}
	s.conns[conn] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.serve(conn)
	}()
}

// Close stops serving and closes every connection, waiting for their
// requests to end.
func (s *Server) Close() {
	s.mu.Lock()
	s.cancel()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) serve(conn net.Conn) {
	ctx, cancel := context.WithCancel(s.ctx)
	c := &Conn{s: s, nc: conn, tls: tlsState(conn)} // Demux shook hands before it handed conn over
	ctx = context.WithValue(ctx, connKey{}, c)
	c.ctx = ctx
	var (
		requests sync.WaitGroup
		slots    = make(chan struct{}, s.cfg.MaxInFlight)
	)
	defer func() {
		// The connection is gone: its requests' contexts end (a held pull
		// stops waiting), then they are waited for, then it is forgotten.
		cancel()
		requests.Wait()
		conn.Close()
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		if s.cfg.OnClose != nil {
			s.cfg.OnClose(c)
		}
	}()
	r := bufio.NewReader(conn)
	for {
		conn.SetReadDeadline(time.Now().Add(clientReadDeadline))
		req, err := ReadCommand(r, s.cfg.MaxFrame)
		if err != nil {
			if errors.Is(err, ErrMalformed) {
				s.cfg.Logger.Warn("remoting: closing a connection that sent a malformed frame", "peer", conn.RemoteAddr(), "err", err)
			} else if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				s.cfg.Logger.Debug("remoting: connection ended", "peer", conn.RemoteAddr(), "err", err)
			}
			return
		}
		if req.IsResponse() {
			continue // an answer to a push: none is waited for
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		requests.Add(1)
		go func() {
			defer func() { <-slots; requests.Done() }()
			resp := s.handle(ctx, req)
			if req.Flag&FlagOneway != 0 {
				return
			}
			resp.Opaque, resp.Flag = req.Opaque, resp.Flag|FlagResponse
			frame, err := resp.Encode(nil)
			if err != nil {
				s.cfg.Logger.Error("remoting: answer not encodable", "code", req.Code, "err", err)
				return
			}
			c.write(frame)
		}()
	}
}

// handle runs the request's handler, answering a panic as a system error
// rather than losing the node.
func (s *Server) handle(ctx context.Context, req *Command) (resp *Command) {
	h, ok := s.cfg.Handlers[req.Code]
	if !ok {
		return &Command{Code: CodeNotSupported, Remark: fmt.Sprintf("request code %d not supported", req.Code)}
	}
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Logger.Error("remoting: handler panicked", "code", req.Code, "panic", p)
			resp = &Command{Code: CodeSystemError, Remark: "internal error"}
		}
	}()
	if resp = h(ctx, req); resp == nil {
		resp = &Command{Code: CodeSystemError, Remark: "no answer"}
	}
	return resp
}
