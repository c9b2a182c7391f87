package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
)

// Route watching: a push consumer follows its topics' routes on a name
// server (NameServer.WatchRoutes) for as long as it runs, so that every
// member of a group sees a change of a topic's queues within a round trip
// of the name server learning it, and rebalances at once. Without it each
// member kept the route it fetched last for up to 30 s (RouteRefresh):
// members that fetched a topic's route on either side of a change (the
// topic created on one more broker group, a name server that had not yet
// learned a group) split different queue lists, so a queue was consumed by
// two members, or by none, until the routes expired (the compose baseline
// drill once delivered 2240 duplicates of 7049 acknowledged messages with
// no fault at all; TestMembersAgreeOnQueuesWhenTheRouteGrows).

// Watch streams that fail are opened again, on the next name server, after
// watchRetry, doubling up to watchRetryMax.
const (
	watchRetry    = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
)

// watchRoutes follows the routes of the consumer's topics until Shutdown:
// each route a name server sends replaces the cached one (a newer master
// included), and one whose queues differ from the cached route's triggers
// a rebalance.
func (c *PushConsumer) watchRoutes() {
	topics := c.rb.topics()
	retry := watchRetry
	for n := 0; c.ctx.Err() == nil; n++ {
		received := false
		err := c.r.watch(c.ctx, topics, n, func(route *pb.RouteResponse) {
			received = true
			if c.r.adopt(route) {
				c.rb.trigger()
			}
		})
		if c.ctx.Err() != nil {
			return
		}
		if received {
			retry = watchRetry // it served: a fresh failure, not a run of them
		}
		c.opts.logger.Debug("route watch ended; opening it again", "err", err, "in", retry)
		sleepCtx(c.ctx, retry)
		retry = min(2*retry, watchRetryMax)
	}
}

// watch follows topics' routes on name server n (modulo their number),
// calling fn with each route it sends, until the stream fails or ctx ends.
func (r *router) watch(ctx context.Context, topics []string, n int, fn func(*pb.RouteResponse)) error {
	addr := r.opts.nameServers[n%len(r.opts.nameServers)]
	conn, err := r.conn(addr)
	if err != nil {
		return err
	}
	req := &pb.WatchRoutesRequest{Topics: topics}
	sctx, err := pb.WithStreamRequest(ctx, req) // signed with an access key, if one is set
	if err != nil {
		return err
	}
	stream, err := pb.NewNameServerClient(conn).WatchRoutes(sctx, req)
	if err != nil {
		return fmt.Errorf("client: watch routes on %s: %w", addr, err)
	}
	for {
		route, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("client: watch routes on %s: %w", addr, err)
		}
		fn(route)
	}
}

// adopt caches a route a name server sent unasked, and reports whether its
// queues differ from the cached route's (or none was cached). A route
// without groups is passed over: the topic is unknown there, or the name
// server, just started, is still learning the cluster (GetRoute answers it
// Unavailable, and a consumer keeps its queues).
func (r *router) adopt(route *pb.RouteResponse) (queuesChanged bool) {
	if len(route.Groups) == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.routes[route.Topic]
	r.routes[route.Topic] = &cachedRoute{route: route, fetched: time.Now()}
	return old == nil || queueSet(old.route) != queueSet(route)
}

// queueSet is what a route says of a topic's queues: each group's read
// queue count and permission, in group order.
func queueSet(route *pb.RouteResponse) string {
	var b strings.Builder
	for _, g := range route.Groups {
		fmt.Fprintf(&b, "%s/%d/%d;", g.Group, g.ReadQueues, g.Perm)
	}
	return b.String()
}
