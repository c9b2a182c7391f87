package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// memberTransport is hashicorp/raft's NetworkTransport with AppendEntries
// that carry entries or a commit index moved onto connections of the
// member's own (the member stream), in the wire form of appendcodec.go.
//
// Both kinds of connection share the member's one listener (and its TLS,
// raftstream.go): splitStream reads the first byte of each connection it
// accepts. A member stream's is memberStreamByte, which is none of
// hashicorp/raft's RPC types (0-5); every other connection goes to the
// NetworkTransport with that byte given back. Heartbeats (hashicorp/raft's
// heartbeat shape: a term and a leader, nothing else) stay on the
// NetworkTransport, whose fast path answers them beside the Raft loop
// (behind heartbeatGate); votes, snapshots, TimeoutNow and pipelined
// requests (MaxRPCsInFlight over 1) stay there too. Raft reads both kinds
// of request from one channel (Consumer).
//
// A follower replies to a request on the connection it came on, and the
// leader sends a follower one request at a time, so the two kinds of
// connection cannot reorder what Raft sees of one follower.
type memberTransport struct {
	*raft.NetworkTransport
	split   *splitStream
	timeout time.Duration
	pool    int
	limits  appendLimits
	log     *slog.Logger

	consume chan raft.RPC // what Raft reads: both kinds of request
	done    chan struct{} // closed by Close, under mu
	once    sync.Once
	wg      sync.WaitGroup // the forwarder

	mu   sync.Mutex
	idle map[raft.ServerAddress][]*memberConn // pooled client connections
}

// memberStreamByte opens a member stream.
const memberStreamByte = 0xA7

// memberStreamVersion follows memberStreamByte: the wire form's version.
const memberStreamVersion = 1

// memberConnBuffer is each member stream connection's read and write
// buffer size.
const memberConnBuffer = 64 << 10

func newMemberTransport(inner raft.StreamLayer, tc *raft.NetworkTransportConfig, limits appendLimits, log *slog.Logger) *memberTransport {
	t := &memberTransport{
		timeout: tc.Timeout, pool: tc.MaxPool, limits: limits, log: log,
		consume: make(chan raft.RPC),
		done:    make(chan struct{}),
		idle:    map[raft.ServerAddress][]*memberConn{},
	}
	t.split = newSplitStream(inner, t.serve, log)
	tc.Stream = t.split
	t.NetworkTransport = raft.NewNetworkTransportWithConfig(tc)
	t.wg.Add(1)
	go t.forward()
	return t
}

// forward hands Raft what the NetworkTransport received.
func (t *memberTransport) forward() {
	defer t.wg.Done()
	in := t.NetworkTransport.Consumer()
	for {
		select {
		case rpc := <-in:
			select {
			case t.consume <- rpc:
			case <-t.done:
				rpc.Respond(nil, raft.ErrTransportShutdown)
				return
			}
		case <-t.done:
			return
		}
	}
}

// Consumer is every request the member received, of both kinds.
func (t *memberTransport) Consumer() <-chan raft.RPC { return t.consume }

// isHeartbeat is hashicorp/raft's own test of a heartbeat (net_transport.go,
// handleCommand), which its fast path answers.
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	leader := req.Addr
	if len(leader) == 0 {
		leader = req.Leader
	}
	return req.Term != 0 && leader != nil && req.PrevLogEntry == 0 && req.PrevLogTerm == 0 &&
		len(req.Entries) == 0 && req.LeaderCommitIndex == 0
}

// AppendEntries sends a heartbeat through the NetworkTransport and
// anything else on a member stream.
func (t *memberTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if isHeartbeat(args) {
		return t.NetworkTransport.AppendEntries(id, target, args, resp)
	}
	c, err := t.conn(target)
	if err != nil {
		return err
	}
	if t.timeout > 0 {
		_ = c.conn.SetDeadline(time.Now().Add(t.timeout))
	}
	if err := c.call(args, resp); err != nil {
		var remote errRemote
		if errors.As(err, &remote) {
			t.release(c)
			return err
		}
		c.conn.Close()
		return fmt.Errorf("cluster: AppendEntries to %s: %w", target, err)
	}
	t.release(c)
	return nil
}

// memberConn is a client's member stream to one peer.
type memberConn struct {
	target raft.ServerAddress
	conn   net.Conn
	r      *bufio.Reader
	w      *bufio.Writer
	buf    []byte // scratch for heads and answers
}

func (c *memberConn) call(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	var err error
	if c.buf, err = writeAppendRequest(c.w, args, c.buf); err != nil {
		return err
	}
	if err := c.w.Flush(); err != nil {
		return err
	}
	c.buf, err = readAppendAnswer(c.r, resp, c.buf)
	return err
}

// conn is a pooled member stream to target, or a new one.
func (t *memberTransport) conn(target raft.ServerAddress) (*memberConn, error) {
	t.mu.Lock()
	if stopped(t.done) {
		t.mu.Unlock()
		return nil, raft.ErrTransportShutdown
	}
	if idle := t.idle[target]; len(idle) > 0 {
		c := idle[len(idle)-1]
		t.idle[target] = idle[:len(idle)-1]
		t.mu.Unlock()
		return c, nil
	}
	t.mu.Unlock()
	conn, err := t.split.inner.Dial(target, t.timeout)
	if err != nil {
		return nil, fmt.Errorf("cluster: dial %s: %w", target, err)
	}
	c := &memberConn{target: target, conn: conn, r: bufio.NewReaderSize(conn, memberConnBuffer), w: bufio.NewWriterSize(conn, memberConnBuffer)}
	_, _ = c.w.Write([]byte{memberStreamByte, memberStreamVersion}) // goes with the first request
	return c, nil
}

// release pools c for its next request, or closes it.
func (t *memberTransport) release(c *memberConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if stopped(t.done) || len(t.idle[c.target]) >= t.pool {
		c.conn.Close()
		return
	}
	t.idle[c.target] = append(t.idle[c.target], c)
}

// serve answers the requests of one accepted member stream until it ends
// (splitStream closes it on Close, and waits).
func (t *memberTransport) serve(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReaderSize(conn, memberConnBuffer)
	w := bufio.NewWriterSize(conn, 4<<10)
	if v, err := r.ReadByte(); err != nil || v != memberStreamVersion {
		t.log.Warn("raft transport: refused a member stream", "remote", conn.RemoteAddr().String(), "version", v, "err", err)
		return
	}
	var head, answer []byte
	respCh := make(chan raft.RPCResponse, 1)
	for {
		var req *raft.AppendEntriesRequest
		var err error
		req, head, err = readAppendRequest(r, t.limits, head)
		if err != nil {
			if !errors.Is(err, io.EOF) && !stopped(t.done) {
				t.log.Warn("raft transport: dropped a member stream", "remote", conn.RemoteAddr().String(), "err", err)
			}
			return
		}
		select {
		case t.consume <- raft.RPC{Command: req, RespChan: respCh}:
		case <-t.done:
			return
		}
		var resp raft.RPCResponse
		select {
		case resp = <-respCh:
		case <-t.done:
			return
		}
		ar, _ := resp.Response.(*raft.AppendEntriesResponse)
		if answer, err = writeAppendAnswer(w, ar, resp.Error, answer); err == nil {
			err = w.Flush()
		}
		if err != nil {
			return
		}
	}
}

// stopped says whether done is closed.
func stopped(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// closeIdle closes the pooled client connections. The caller holds mu.
func (t *memberTransport) closeIdle() {
	for target, idle := range t.idle {
		for _, c := range idle {
			c.conn.Close()
		}
		delete(t.idle, target)
	}
}

// CloseStreams closes the member's pooled connections of both kinds,
// which ends the peers' handlers of them.
func (t *memberTransport) CloseStreams() {
	t.mu.Lock()
	t.closeIdle()
	t.mu.Unlock()
	t.NetworkTransport.CloseStreams()
}

// Close stops both transports and waits for the member streams it serves
// to end. Raft's shutdown calls it, and so does RaftNode.Stop.
func (t *memberTransport) Close() error {
	var err error
	t.once.Do(func() {
		t.mu.Lock()
		close(t.done) // a member stream waiting for Raft gives up
		t.closeIdle()
		t.mu.Unlock()
		// Closes splitStream: its listener, and the member streams it
		// serves, waiting for them.
		err = t.NetworkTransport.Close()
		t.wg.Wait()
	})
	return err
}

// splitStream is the stream layer the NetworkTransport sees: the member's
// listener with member streams taken off to be served on their own.
type splitStream struct {
	inner  raft.StreamLayer
	member func(net.Conn) // serves a member stream
	log    *slog.Logger

	conns chan net.Conn // for the NetworkTransport
	done  chan struct{} // closed by Close, under mu
	once  sync.Once
	wg    sync.WaitGroup // the accept loop, and each accepted connection until it is handed on or served
	mu    sync.Mutex
	live  map[net.Conn]struct{} // accepted: being sorted, or served as a member stream
}

func newSplitStream(inner raft.StreamLayer, member func(net.Conn), log *slog.Logger) *splitStream {
	s := &splitStream{inner: inner, member: member, log: log, conns: make(chan net.Conn), done: make(chan struct{}), live: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

func (s *splitStream) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.inner.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			case <-time.After(50 * time.Millisecond): // a listener's passing error
			}
			continue
		}
		s.mu.Lock()
		if stopped(s.done) {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.live[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.sort(c)
	}
}

// sort reads c's first byte (a dialer writes it with its first request)
// and hands c on by it, or serves it as a member stream.
func (s *splitStream) sort(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.live, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	var first [1]byte
	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	_, err := io.ReadFull(c, first[:])
	_ = c.SetReadDeadline(time.Time{})
	if err != nil || stopped(s.done) {
		c.Close()
		return
	}
	if first[0] == memberStreamByte {
		s.member(c)
		return
	}
	select {
	case s.conns <- &replayConn{Conn: c, first: first[0], pending: true}:
	case <-s.done:
		c.Close()
	}
}

// Accept returns the next connection that is not a member stream.
func (s *splitStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *splitStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.inner.Dial(addr, timeout)
}

func (s *splitStream) Addr() net.Addr { return s.inner.Addr() }

// Close closes the listener and the connections not handed on (being
// sorted, or served as member streams), and waits for their goroutines
// and the accept loop.
func (s *splitStream) Close() error {
	var err error
	s.once.Do(func() {
		s.mu.Lock()
		close(s.done)
		for c := range s.live {
			c.Close()
		}
		s.mu.Unlock()
		err = s.inner.Close()
		s.wg.Wait()
	})
	return err
}

// replayConn gives back the first byte that splitStream read.
type replayConn struct {
	net.Conn
	first   byte
	pending bool
}

func (c *replayConn) Read(p []byte) (int, error) {
	if c.pending && len(p) > 0 {
		p[0], c.pending = c.first, false
		return 1, nil
	}
	return c.Conn.Read(p)
}

// tcpStream is a plain TCP stream layer (hashicorp/raft's TCPStreamLayer,
// whose fields are not exported).
type tcpStream struct {
	lis       net.Listener
	advertise net.Addr
}

func newTCPStream(bind string, advertise *net.TCPAddr) (*tcpStream, error) {
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise.IP == nil || advertise.IP.IsUnspecified() {
		lis.Close()
		return nil, fmt.Errorf("cluster: advertise address %s is not one peers can dial", advertise)
	}
	return &tcpStream{lis: lis, advertise: advertise}, nil
}

func (s *tcpStream) Accept() (net.Conn, error) { return s.lis.Accept() }
func (s *tcpStream) Close() error              { return s.lis.Close() }
func (s *tcpStream) Addr() net.Addr            { return s.advertise }
func (s *tcpStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

var (
	_ raft.StreamLayer = (*splitStream)(nil)
	_ raft.StreamLayer = (*tcpStream)(nil)
	_ raft.Transport   = (*memberTransport)(nil)
	_ raft.WithClose   = (*memberTransport)(nil)
	_ raft.WithPreVote = (*memberTransport)(nil)
)
