package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
)

// members asks every replica of the groups hosting topic for the group's
// members and takes the union: each replica knows the members from their
// heartbeats, and one that has just restarted (and may be master already)
// knows few until they heartbeat again, so one broker's list alone could
// hand a member every queue.
//
// When every replica that answered has restarted, the union is no better:
// after a whole group's power cut the first member to heartbeat again found
// itself alone and took every queue, while the others, still reconnecting,
// read theirs on; both read the same queues and delivered the same
// messages (349 duplicates in one of 25 long power-loss runs, 2026-12-03).
// So while every answering replica has been up less than the hold
// (memberHold), the members this member listed last are kept too, but for
// those a replica saw leave: a member that left unseen (with its replicas
// down) is dropped once they have heard long enough.
func (c *PushConsumer) members(ctx context.Context, topic string) ([]string, error) {
	addrs, err := c.r.replicaAddrs(ctx, topic)
	if err != nil {
		return nil, err
	}
	var (
		mu       sync.Mutex
		set      = map[string]bool{}
		departed = map[string]bool{}
		answered bool
		heard    time.Duration // the longest any answering replica has been up
	)
	c.toEveryReplica(ctx, addrs, func(cctx context.Context, _ string, b pb.BrokerClient) {
		resp, err := b.GetConsumerList(cctx, &pb.GetConsumerListRequest{ConsumerGroup: c.opts.group})
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		answered = true
		heard = max(heard, time.Duration(resp.HeardForMs)*time.Millisecond)
		for _, id := range resp.ClientIds {
			set[id] = true
		}
		for _, id := range resp.DepartedIds {
			departed[id] = true
		}
	})
	if !answered {
		return nil, fmt.Errorf("client: no replica of %s answered the member list", topic)
	}
	return c.known.update(topic, set, departed, young(heard, c.cfg.HeartbeatInterval)), nil
}

// young reports whether replicas of which the longest up has heard
// heartbeats for heard may not have heard from every member yet. A broker
// from before heard_for_ms says 0: taken as old, its list as whole, so
// that members who left are not kept for ever.
func young(heard, heartbeat time.Duration) bool {
	return heard > 0 && heard < memberHold(heartbeat)
}

// memberHold is how long a replica must have been up for its member list
// to be believed whole: every member heartbeats once an interval, and one
// whose connection went down with the replica first waits up to the
// reconnection backoff's longest delay (reconnect, routes.go), jittered.
func memberHold(heartbeat time.Duration) time.Duration {
	return 2*heartbeat + 2*reconnect.Backoff.MaxDelay
}

// memberView is the group's members as this member last listed them, per
// topic (each topic's replicas answer for it).
type memberView struct {
	mu   sync.Mutex
	last map[string][]string
}

// update returns the sorted members of listed, with those of the last list
// that did not depart kept when young says the replicas may not have heard
// from all of them yet, and remembers the result.
func (v *memberView) update(topic string, listed, departed map[string]bool, young bool) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]string, 0, len(listed))
	for id := range listed {
		out = append(out, id)
	}
	if young {
		for _, id := range v.last[topic] {
			if !listed[id] && !departed[id] {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	if v.last == nil {
		v.last = map[string][]string{}
	}
	v.last[topic] = out
	return out
}
