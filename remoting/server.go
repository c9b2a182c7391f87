package remoting

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Response codes (RocketMQ's ResponseCode) the server itself uses.
const (
	CodeSuccess        = 0
	CodeSystemError    = 1
	CodeNotSupported   = 3
	CodeTopicNotExist  = 17
	clientReadDeadline = 2 * time.Minute // the Go client's own idle cut is 120 s
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
	Logger      *slog.Logger
}

// Server serves the remoting protocol on the connections it is given.
type Server struct {
	cfg    ServerConfig
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewServer makes a server; Serve gives it connections.
func NewServer(cfg ServerConfig) *Server {
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = DefaultMaxFrame
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1024
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
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
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		conn.Close()
	}()
	ctx, cancel := context.WithCancel(s.ctx)
	var (
		writeMu  sync.Mutex
		requests sync.WaitGroup
		slots    = make(chan struct{}, s.cfg.MaxInFlight)
	)
	// The connection is gone: its requests' contexts end (a held pull
	// stops waiting), then they are waited for.
	defer func() { cancel(); requests.Wait() }()
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
			continue // an answer to a server push (code 40 has none we wait for)
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
			resp.Opaque, resp.Flag = req.Opaque, resp.Flag|FlagResponse
			frame, err := resp.Encode(nil)
			if err != nil {
				s.cfg.Logger.Error("remoting: answer not encodable", "code", req.Code, "err", err)
				return
			}
			writeMu.Lock()
			defer writeMu.Unlock()
			conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := conn.Write(frame); err != nil {
				conn.Close() // the reader sees it and ends the connection
			}
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
