package broker

import (
	"context"
	"sort"
	"sync"

	"google.golang.org/grpc/stats"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/remoting"
)

// clientConns are the clients that heartbeat here, by the connection they
// heartbeat on: RocketMQ's clients over the remoting protocol, and
// raftmq's SDK over gRPC. What RocketMQ's broker does with its channels:
//   - when a connection closes, the consumers that heartbeated on it
//     leave their groups at once, rather than after ConsumerExpiry (2
//     minutes): a consumer killed, or its machine gone (the server's
//     keepalive ends the connection within 40 s), no longer holds its
//     queues; RocketMQ's Go client sends no unregister at all;
//   - when a group's members change, code 40 is pushed to each RocketMQ
//     member, so the official client rebalances at once instead of at its
//     next 20 s round (raftmq's consumers hear it in heartbeat and pull
//     answers instead: a gRPC connection takes no pushes);
//   - a RocketMQ transactional producer is asked about its group's open
//     halves on the connection it heartbeats on (code 39).
type clientConns struct {
	mu      sync.Mutex
	clients map[string]*connClient // by client id
	perConn map[pusher]int         // how many client ids each connection has
	next    int                    // round robin over a group's producers
}

// pusher is a client's connection: a *remoting.Conn, or a *grpcConn.
type pusher interface{ Push(*remoting.Command) }

// grpcConn is a gRPC connection's identity (connTracker puts it in the
// connection's context, which its RPCs' contexts derive from). It takes no
// pushes.
type grpcConn struct {
	// streamedSends holds a token for each send in progress on the
	// connection's send streams (sendstream.go): HTTP/2 caps a
	// connection's RPCs, this its streamed sends, both at
	// MaxConcurrentStreams.
	streamedSends chan struct{}
}

func (*grpcConn) Push(*remoting.Command) {}

type grpcConnKey struct{}

// grpcConnOf is the gRPC connection an RPC came on, nil for a call that
// came another way (the remoting gateway's).
func grpcConnOf(ctx context.Context) *grpcConn {
	c, _ := ctx.Value(grpcConnKey{}).(*grpcConn)
	return c
}

// connTracker is the broker's gRPC stats handler: it names each
// connection, and calls ended when one ends.
type connTracker struct {
	ended         func(*grpcConn)
	streamedSends int // the cap of a connection's streamed sends in progress
}

func (h connTracker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, grpcConnKey{}, &grpcConn{streamedSends: make(chan struct{}, h.streamedSends)})
}

func (h connTracker) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, end := s.(*stats.ConnEnd); end {
		if c := grpcConnOf(ctx); c != nil {
			h.ended(c)
		}
	}
}

func (connTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (connTracker) HandleRPC(context.Context, stats.RPCStats)                       {}

// connClient is one client id's connection, consumer and producer
// groups, and who heartbeated (the checks a producer is sent are of
// topics its caller may publish to).
type connClient struct {
	conn      pusher
	groups    map[string]bool
	producers map[string]bool
	caller    remotingCaller
}

// maxClientsPerConn bounds the client ids one connection may heartbeat
// for (the official client has one per process and name server list), so
// a connection cannot grow the table without bound.
const maxClientsPerConn = 64

func newClientConns() *clientConns {
	return &clientConns{clients: map[string]*connClient{}, perConn: map[pusher]int{}}
}

// heartbeat records that client, on conn, is a member of groups and a
// producer of producers; it reports false when conn holds too many client
// ids already.
func (t *clientConns) heartbeat(conn pusher, client string, groups []*pb.ConsumerGroupInfo, producers []string, caller remotingCaller) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.clients[client]
	if c == nil || c.conn != conn {
		if t.perConn[conn] >= maxClientsPerConn {
			return false
		}
		if c != nil { // it moved to a new connection
			t.dropLocked(c.conn)
		}
		c = &connClient{conn: conn}
		t.clients[client] = c
		t.perConn[conn]++
	}
	c.groups = make(map[string]bool, len(groups))
	for _, g := range groups {
		c.groups[g.Group] = true
	}
	c.producers = make(map[string]bool, len(producers))
	for _, g := range producers {
		c.producers[g] = true
	}
	c.caller = caller
	return true
}

// pushToProducer pushes cmd to a connection of producer group group whose
// caller may (allowed), round robin over them, and says whether it found
// one.
func (t *clientConns) pushToProducer(group string, allowed func(remotingCaller) bool, cmd *remoting.Command) bool {
	t.mu.Lock()
	var ids []string
	for id, c := range t.clients {
		if c.producers[group] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var conn pusher
	for i := range ids {
		c := t.clients[ids[(t.next+i)%len(ids)]]
		if allowed(c.caller) {
			conn, t.next = c.conn, t.next+i+1
			break
		}
	}
	t.mu.Unlock()
	if conn == nil {
		return false
	}
	conn.Push(cmd)
	return true
}

func (t *clientConns) dropLocked(conn pusher) {
	if t.perConn[conn]--; t.perConn[conn] <= 0 {
		delete(t.perConn, conn)
	}
}

// notify pushes code 40 for group to the connection of each of its
// members here.
func (t *clientConns) notify(group string) {
	t.mu.Lock()
	conns := map[pusher]bool{}
	for _, c := range t.clients {
		if c.groups[group] {
			conns[c.conn] = true
		}
	}
	t.mu.Unlock()
	for conn := range conns {
		conn.Push(&remoting.Command{Code: remoting.CodeNotifyConsumerIdsChanged, ExtFields: map[string]string{"consumerGroup": group}})
	}
}

// closed forgets the clients whose connection conn was and returns their
// groups by client id (a client that has heartbeated since on another
// connection stays).
func (t *clientConns) closed(conn pusher) map[string][]*pb.ConsumerGroupInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	gone := map[string][]*pb.ConsumerGroupInfo{}
	for id, c := range t.clients {
		if c.conn != conn {
			continue
		}
		for g := range c.groups {
			gone[id] = append(gone[id], &pb.ConsumerGroupInfo{Group: g})
		}
		delete(t.clients, id)
	}
	delete(t.perConn, conn)
	return gone
}
