package cluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// testMemberTransport is a member transport on a loopback port of its
// own, whose requests its test answers from Consumer.
func testMemberTransport(t testing.TB) *memberTransport {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := newMemberTransport(&tcpStream{lis: lis, advertise: lis.Addr()},
		&raft.NetworkTransportConfig{MaxPool: 2, Timeout: 2 * time.Second, Logger: nil},
		appendLimits{entryBytes: 1 << 20}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { tr.Close() })
	return tr
}

// answer serves one request from tr's Consumer with fn's answer.
func answer(t *testing.T, tr *memberTransport, fn func(raft.RPC) (any, error)) <-chan raft.RPC {
	t.Helper()
	seen := make(chan raft.RPC, 1)
	go func() {
		select {
		case rpc := <-tr.Consumer():
			resp, err := fn(rpc)
			rpc.Respond(resp, err)
			seen <- rpc
		case <-time.After(5 * time.Second):
			close(seen)
		}
	}()
	return seen
}

// liveCount is how many accepted connections the member has not handed
// to the NetworkTransport: member streams served, and any being sorted.
func (t *memberTransport) liveCount() int {
	t.split.mu.Lock()
	defer t.split.mu.Unlock()
	return len(t.split.live)
}

// An AppendEntries with entries goes on a member stream and reaches the
// peer's Raft intact; the answer comes back, and the stream is kept for
// the next request.
func TestMemberStreamCarriesAppendEntries(t *testing.T) {
	a, b := testMemberTransport(t), testMemberTransport(t)
	want := sampleAppendRequest()
	for round := 0; round < 2; round++ {
		seen := answer(t, b, func(rpc raft.RPC) (any, error) {
			return &raft.AppendEntriesResponse{Term: 7, LastLog: 44, Success: true}, nil
		})
		var resp raft.AppendEntriesResponse
		if err := a.AppendEntries("b", b.LocalAddr(), want, &resp); err != nil {
			t.Fatal(err)
		}
		if !resp.Success || resp.LastLog != 44 || resp.Term != 7 {
			t.Fatalf("answer %+v", resp)
		}
		rpc, ok := <-seen
		if !ok {
			t.Fatal("the request never reached the peer's Raft")
		}
		sameRequest(t, rpc.Command.(*raft.AppendEntriesRequest), want)
	}
	if n := b.liveCount(); n != 1 {
		t.Fatalf("the peer serves %d member streams, want the one pooled stream", n)
	}
}

// An error Raft answers with comes back as the error, and the stream
// stays usable.
func TestMemberStreamCarriesRaftsError(t *testing.T) {
	a, b := testMemberTransport(t), testMemberTransport(t)
	answer(t, b, func(raft.RPC) (any, error) { return nil, errors.New("unknown peer") })
	var resp raft.AppendEntriesResponse
	err := a.AppendEntries("b", b.LocalAddr(), &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 3, PrevLogTerm: 1}, &resp)
	if err == nil || err.Error() != "unknown peer" {
		t.Fatalf("got %v, want Raft's error", err)
	}
	answer(t, b, func(raft.RPC) (any, error) { return &raft.AppendEntriesResponse{Success: true}, nil })
	if err := a.AppendEntries("b", b.LocalAddr(), &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 3, PrevLogTerm: 1}, &resp); err != nil || !resp.Success {
		t.Fatalf("after an error: %v, %+v", err, resp)
	}
	if n := b.liveCount(); n != 1 {
		t.Fatalf("the peer serves %d member streams, want 1", n)
	}
}

// Heartbeats stay on hashicorp/raft's transport, whose fast path answers
// them beside the Raft loop; votes come through Consumer from it.
func TestHeartbeatsAndVotesStayOnRaftsTransport(t *testing.T) {
	a, b := testMemberTransport(t), testMemberTransport(t)
	beats := make(chan raft.RPC, 1)
	b.SetHeartbeatHandler(func(rpc raft.RPC) {
		rpc.Respond(&raft.AppendEntriesResponse{Term: 5, Success: true}, nil)
		beats <- rpc
	})
	hb := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte(a.LocalAddr())}, Term: 5}
	if !isHeartbeat(hb) {
		t.Fatal("a heartbeat not taken for one")
	}
	var resp raft.AppendEntriesResponse
	if err := a.AppendEntries("b", b.LocalAddr(), hb, &resp); err != nil || !resp.Success {
		t.Fatalf("heartbeat: %v, %+v", err, resp)
	}
	select {
	case <-beats:
	default:
		t.Fatal("the heartbeat did not reach the fast path")
	}
	seen := answer(t, b, func(rpc raft.RPC) (any, error) { return &raft.RequestVoteResponse{Term: 6, Granted: true}, nil })
	var vr raft.RequestVoteResponse
	if err := a.RequestVote("b", b.LocalAddr(), &raft.RequestVoteRequest{Term: 6}, &vr); err != nil || !vr.Granted {
		t.Fatalf("vote: %v, %+v", err, vr)
	}
	if rpc := <-seen; rpc.Command == nil {
		t.Fatal("the vote never reached the peer's Raft")
	}
	// The NetworkTransport's connections are handed on as soon as their
	// first byte is read; a member stream would stay.
	clustertest.WaitFor(t, 2*time.Second, "no member stream served", func() bool { return b.liveCount() == 0 })
}

// rawMemberStream dials tr and opens a member stream by hand.
func rawMemberStream(t *testing.T, tr *memberTransport, version byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", string(tr.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte{memberStreamByte, version}); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedByPeer reports whether c's peer closed it (a read ends without
// data) within the deadline.
func closedByPeer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && errors.Is(err, io.EOF)
}

// A peer that sends what does not parse, an entry over the member's cap or
// another version of the wire loses its stream; the member goes on
// serving the others.
func TestMemberStreamDropsABadPeer(t *testing.T) {
	a, b := testMemberTransport(t), testMemberTransport(t)
	big := sampleAppendRequest()
	big.Entries[0].Data = make([]byte, 2<<20) // over b's 1 MiB cap
	bigHead, err := appendHead(nil, big)
	if err != nil {
		t.Fatal(err)
	}
	for name, send := range map[string]func(net.Conn){
		"oversized head": func(c net.Conn) { c.Write([]byte{0xff, 0xff, 0xff, 0xff}) },
		"garbage head":   func(c net.Conn) { c.Write([]byte{3, 0, 0, 0, 1, 2, 3}) },
		"entry over cap": func(c net.Conn) { c.Write(bigHead) },
	} {
		if !closedByPeer(func() net.Conn { c := rawMemberStream(t, b, memberStreamVersion); send(c); return c }()) {
			t.Errorf("%s: the stream stayed open", name)
		}
	}
	if !closedByPeer(rawMemberStream(t, b, memberStreamVersion+1)) {
		t.Error("another version: the stream stayed open")
	}
	answer(t, b, func(raft.RPC) (any, error) { return &raft.AppendEntriesResponse{Success: true}, nil })
	var resp raft.AppendEntriesResponse
	if err := a.AppendEntries("b", b.LocalAddr(), sampleAppendRequest(), &resp); err != nil || !resp.Success {
		t.Fatalf("after the bad peers: %v, %+v", err, resp)
	}
}

// Close ends what it serves: a member stream idle between requests, a
// request waiting for Raft, a connection that never sent its first byte.
// Left to themselves the first would wait for ever and the last for
// handshakeTimeout (5 s), so a Close that returns within 3 s closed them.
// The leak check of TestMain sees any goroutine left.
func TestMemberTransportCloseEndsItsStreams(t *testing.T) {
	idle, waiting, b := testMemberTransport(t), testMemberTransport(t), testMemberTransport(t)
	answer(t, b, func(raft.RPC) (any, error) { return &raft.AppendEntriesResponse{Success: true}, nil })
	var resp raft.AppendEntriesResponse
	if err := idle.AppendEntries("b", b.LocalAddr(), sampleAppendRequest(), &resp); err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		sent <- waiting.AppendEntries("b", b.LocalAddr(), sampleAppendRequest(), &resp)
	}()
	// Nobody reads b's Consumer now: the second request's stream stays,
	// then so does a connection that sends nothing.
	clustertest.WaitFor(t, 5*time.Second, "the request served", func() bool { return b.liveCount() == 2 })
	silent, err := net.Dial("tcp", string(b.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	clustertest.WaitFor(t, 5*time.Second, "the silent connection accepted", func() bool { return b.liveCount() == 3 })
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close waited for connections it should have closed")
	}
	if err := <-sent; err == nil {
		t.Fatal("a request cut off by the peer's Close succeeded")
	}
	if !closedByPeer(silent) {
		t.Fatal("a connection that sent nothing stayed open past Close")
	}
	if _, err := b.conn(idle.LocalAddr()); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Fatalf("a closed transport dialed: %v", err)
	}
}

// The first byte a NetworkTransport connection sent is given back to it.
func TestReplayConnGivesBackTheFirstByte(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	go func() { client.Write([]byte("bc")) }()
	c := &replayConn{Conn: server, first: 'a', pending: true}
	got := make([]byte, 3)
	if _, err := io.ReadFull(bufio.NewReader(c), got); err != nil || !bytes.Equal(got, []byte("abc")) {
		t.Fatalf("read %q, %v", got, err)
	}
}

// A group's entries reach its followers on member streams: each follower
// serves one from the leader.
func TestGroupReplicatesOnMemberStreams(t *testing.T) {
	g := newTestGroup(t, 3, 50*time.Millisecond, nil)
	l := g.leader()
	g.converge(g.apply(l, "streams", 20))
	for i, n := range g.nodes {
		if i == l {
			continue
		}
		if got := n.transport.liveCount(); got < 1 {
			t.Errorf("follower %d serves %d member streams", i+1, got)
		}
	}
}

// BenchmarkAppendEntries sends AppendEntries of one entry to a peer whose
// Raft answers at once, over loopback: on hashicorp/raft's
// NetworkTransport (go-msgpack) and on a member stream. 560 KiB is an
// entry of batched publish (about 550 records of 1 KiB), 16 KiB one of
// sync16. Both ends run in this process, so a request's time and
// allocations are the leader's and the follower's together.
func BenchmarkAppendEntries(b *testing.B) {
	for _, size := range []int{16 << 10, 560 << 10} {
		data := bytes.Repeat([]byte("r"), size)
		req := &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("1"), Addr: []byte("127.0.0.1:1")},
			Term:      2, PrevLogEntry: 9, PrevLogTerm: 2, LeaderCommitIndex: 9,
			Entries: []*raft.Log{{Index: 10, Term: 2, Type: raft.LogCommand, Data: data, Extensions: entryChecksum(data), AppendedAt: time.Now()}},
		}
		b.Run(fmt.Sprintf("network-transport/%dKiB", size>>10), func(b *testing.B) {
			tr := func() raft.Transport {
				t, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { t.Close() })
				return t
			}
			benchAppend(b, tr(), tr(), req)
		})
		b.Run(fmt.Sprintf("member-stream/%dKiB", size>>10), func(b *testing.B) {
			benchAppend(b, testMemberTransport(b), testMemberTransport(b), req)
		})
	}
}

func benchAppend(b *testing.B, leader, follower raft.Transport, req *raft.AppendEntriesRequest) {
	answerAppends(b, follower, func(*raft.AppendEntriesRequest) *raft.AppendEntriesResponse {
		return &raft.AppendEntriesResponse{Term: 2, LastLog: 10, Success: true}
	})
	b.SetBytes(int64(len(req.Entries[0].Data)))
	b.ReportAllocs()
	var resp raft.AppendEntriesResponse
	for b.Loop() {
		if err := leader.AppendEntries("f", follower.LocalAddr(), req, &resp); err != nil || !resp.Success {
			b.Fatalf("%v, %+v", err, resp)
		}
	}
}
