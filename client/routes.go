package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
)

// router finds where topics live: it asks the name servers (the one that
// answered last; the next as well when that one fails or is slow), caches
// routes, refreshes them every RouteRefresh and at once when a send or
// pull learns they are stale, and keeps one gRPC connection per address.
type router struct {
	opts options

	mu     sync.Mutex
	routes map[string]*cachedRoute
	conns  map[string]*grpc.ClientConn
	closed bool

	lastNameServer atomic.Int32 // index of the name server that answered last
}

type cachedRoute struct {
	route      *pb.RouteResponse
	fetched    time.Time
	refreshing bool // a caller is fetching a newer one; guarded by router.mu
}

func newRouter(o options) *router {
	return &router{opts: o, routes: map[string]*cachedRoute{}, conns: map[string]*grpc.ClientConn{}}
}

var errClosed = errors.New("client: shut down")

// reconnect is how soon a connection to a broker that went away is tried
// again. gRPC's default backoff grows to 2 minutes: a replica restarted
// after a few seconds' outage would go unheard for tens of seconds, missing
// this client's heartbeats, so that as a new master it would list too few
// consumers and hand one member every queue.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 2 * time.Second,
}

// conn returns the connection to addr, dialing it lazily.
func (r *router) conn(addr string) (*grpc.ClientConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errClosed
	}
	if c, ok := r.conns[addr]; ok {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if r.opts.tls != nil {
		creds = credentials.NewTLS(r.opts.tls)
	}
	target, dialOpts := addr, []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
		grpc.WithConnectParams(reconnect),
		grpc.WithStaticStreamWindowSize(int32(r.opts.streamWindow)), grpc.WithStaticConnWindowSize(int32(r.opts.connWindow))}
	if r.opts.signer != nil {
		dialOpts = append(dialOpts, r.opts.signer.DialOptions()...)
	}
	if r.opts.dialer != nil {
		// passthrough hands the address to the dialer unresolved.
		target, dialOpts = "passthrough:///"+addr, append(dialOpts, grpc.WithContextDialer(r.opts.dialer))
	}
	c, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		return nil, err
	}
	r.conns[addr] = c
	return c, nil
}

func (r *router) broker(addr string) (pb.BrokerClient, error) {
	c, err := r.conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewBrokerClient(c), nil
}

// nameServerHedge is how long a name server may take to answer before the
// next one is asked as well. A route query takes well under a millisecond
// (GetRoute answers from memory); a name server that has not answered in
// 300 ms is frozen, overloaded or cut off, and waiting out its 3 s timeout
// stalled sends for that long (the compose drill that cuts a name server
// off: write gaps of 3.5 s).
const nameServerHedge = 300 * time.Millisecond

// askNameServers calls call on the name servers, starting with the one
// that answered last, and returns the first answer (a TOPIC_NOT_FOUND is
// an answer). The next name server is asked as soon as one fails, or once
// nameServerHedge passes without its answer; each call is bounded by 3 s.
func askNameServers[T any](ctx context.Context, r *router, call func(context.Context, pb.NameServerClient) (T, error)) (T, error) {
	type result struct {
		n   int
		v   T
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	results := make(chan result, len(r.opts.nameServers))
	var running sync.WaitGroup
	defer func() { cancel(); running.Wait() }() // the calls still out end with ctx
	first := int(r.lastNameServer.Load())
	ask := func(i int) error {
		n := (first + i) % len(r.opts.nameServers)
		c, err := r.conn(r.opts.nameServers[n])
		if err != nil {
			return err
		}
		running.Add(1)
		go func() {
			defer running.Done()
			cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
			defer ccancel()
			v, err := call(cctx, pb.NewNameServerClient(c))
			results <- result{n, v, err}
		}()
		return nil
	}
	var zero T
	asked, pending := 0, 0
	hedge := time.NewTimer(nameServerHedge)
	defer hedge.Stop()
	next := func() error { // ask one more name server, if one is left
		if asked == len(r.opts.nameServers) {
			return nil
		}
		if err := ask(asked); err != nil {
			return err
		}
		asked, pending = asked+1, pending+1
		hedge.Reset(nameServerHedge)
		return nil
	}
	if err := next(); err != nil {
		return zero, err
	}
	for {
		select {
		case res := <-results:
			pending--
			if reason, _ := pb.ReasonOf(res.err); res.err == nil || reason == pb.ErrorReason_TOPIC_NOT_FOUND {
				r.lastNameServer.Store(int32(res.n))
				return res.v, res.err
			}
			if err := next(); err != nil {
				return zero, err
			}
			if pending == 0 {
				return zero, fmt.Errorf("client: no name server answered (%s): %w", strings.Join(r.opts.nameServers, ","), res.err)
			}
		case <-hedge.C:
			if err := next(); err != nil {
				return zero, err
			}
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
}

// route returns topic's route, from the cache while it is fresh.
func (r *router) route(ctx context.Context, topic string) (*pb.RouteResponse, error) {
	return r.routeWithin(ctx, topic, r.opts.routeRefresh)
}

// routeWithin returns the topic's route as fetched within maxAge. While
// one caller refreshes a cached route, the others use the cached one, so
// that many senders asking at once cost the name servers one query.
func (r *router) routeWithin(ctx context.Context, topic string, maxAge time.Duration) (*pb.RouteResponse, error) {
	r.mu.Lock()
	c := r.routes[topic]
	if c != nil && (time.Since(c.fetched) < maxAge || c.refreshing) {
		r.mu.Unlock()
		return c.route, nil
	}
	if c != nil {
		c.refreshing = true
	}
	r.mu.Unlock()
	route, err := r.refresh(ctx, topic)
	if err != nil && c != nil {
		r.mu.Lock()
		c.refreshing = false // let the next caller try again
		r.mu.Unlock()
	}
	return route, err
}

// refresh fetches topic's route now.
func (r *router) refresh(ctx context.Context, topic string) (*pb.RouteResponse, error) {
	route, err := askNameServers(ctx, r, func(ctx context.Context, c pb.NameServerClient) (*pb.RouteResponse, error) {
		return c.GetRoute(ctx, &pb.GetRouteRequest{Topic: topic})
	})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.routes[topic] = &cachedRoute{route: route, fetched: time.Now()}
	r.mu.Unlock()
	return route, nil
}

// invalidate drops a cached route after a sign it is stale.
func (r *router) invalidate(topic string) {
	r.mu.Lock()
	delete(r.routes, topic)
	r.mu.Unlock()
}

// clusterGroups lists the broker groups the name servers know.
func (r *router) clusterGroups(ctx context.Context) ([]*pb.ClusterGroup, error) {
	info, err := askNameServers(ctx, r, func(ctx context.Context, c pb.NameServerClient) (*pb.ClusterInfoResponse, error) {
		return c.GetClusterInfo(ctx, &pb.GetClusterInfoRequest{})
	})
	if err != nil {
		return nil, err
	}
	return info.Groups, nil
}

func (r *router) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// groupRoute finds broker group group in topic's route.
func (r *router) groupRoute(ctx context.Context, topic, group string) (*pb.GroupRoute, error) {
	route, err := r.route(ctx, topic)
	if err != nil {
		return nil, err
	}
	for _, g := range route.Groups {
		if g.Group == group {
			return g, nil
		}
	}
	return nil, fmt.Errorf("client: topic %s is not on group %s", topic, group)
}

// replicaAddrs lists the addresses of every replica of the broker groups
// hosting topic.
func (r *router) replicaAddrs(ctx context.Context, topic string) ([]string, error) {
	route, err := r.route(ctx, topic)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, g := range route.Groups {
		for _, rep := range g.Replicas {
			addrs = append(addrs, rep.GrpcAddress)
		}
	}
	return addrs, nil
}

// masterAddr is a group's master address in a route ("" when none known).
func masterAddr(replicas []*pb.ReplicaInfo) string {
	for _, rep := range replicas {
		if rep.Master {
			return rep.GrpcAddress
		}
	}
	return ""
}

// retriable reports whether a failed call may succeed elsewhere or later:
// not the master, unreachable, overloaded, timed out.
func retriable(err error) bool {
	reason, _ := pb.ReasonOf(err)
	switch reason {
	case pb.ErrorReason_NOT_LEADER, pb.ErrorReason_TOO_MANY_REQUESTS, pb.ErrorReason_TIMEOUT:
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}
