package broker

import (
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster/pb"
)

// consumerTable is who consumes what, from heartbeats: per group, its
// members (client ids) with their subscriptions, each dropped after
// ConsumerExpiry without a heartbeat. It lives in memory on each replica
// (clients heartbeat to every broker they use), as in RocketMQ.
//
// Each member is told when its group's members change, once: in a
// heartbeat's answer or a pull's (noticeChange), whichever comes first;
// and onChange (the hold service) answers the group's held pulls at once,
// so a member long-polling hears of a join within a round trip rather
// than at its next heartbeat.
type consumerTable struct {
	mu       sync.Mutex
	expiry   time.Duration
	groups   map[string]*consumerGroup
	seenVer  map[string]map[string]uint64 // client -> group -> version it last saw
	onChange func(group string)           // called without mu held
	// started is when this table began taking heartbeats: members that
	// have not heartbeated since are missing from it (GetConsumerList
	// says how long it has been). departed holds, per group, the members
	// seen leaving (unregistered, expired, or their connection ended) in
	// the last expiry, and when, so that a member keeping the group's last
	// list while this table is young (client/memberlist.go) drops those
	// at once.
	started  time.Time
	departed map[string]map[string]time.Time
}

// maxDeparted bounds the departures a group keeps: past it they are not
// recorded, and members holding on to one drop it once the table is old.
const maxDeparted = 1024

type consumerGroup struct {
	members map[string]*member // by client id
	version uint64             // bumped when members change
}

// member is what a member's last heartbeat said.
type member struct {
	last time.Time
	info *pb.ConsumerGroupInfo // its mode, subscriptions, held queues
}

func newConsumerTable(expiry time.Duration, onChange func(group string)) *consumerTable {
	return &consumerTable{expiry: expiry, groups: map[string]*consumerGroup{}, seenVer: map[string]map[string]uint64{}, onChange: onChange,
		started: time.Now(), departed: map[string]map[string]time.Time{}}
}

// notify calls onChange for each of groups; callers have released mu.
func (t *consumerTable) notify(groups []string) {
	for _, g := range groups {
		if t.onChange != nil {
			t.onChange(g)
		}
	}
}

// changedFor reports whether group's members changed since client last
// heard, without telling it.
func (t *consumerTable) changedFor(client, group string) bool {
	return t.changeSince(client, group, false)
}

// noticeChange is changedFor, and records that client has now heard.
func (t *consumerTable) noticeChange(client, group string) bool {
	return t.changeSince(client, group, true)
}

// changeSince reports whether group's members changed since client last
// heard (a client that never heartbeated here has heard nothing to
// compare), and with tell records that it has now.
func (t *consumerTable) changeSince(client, group string, tell bool) bool {
	if client == "" {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	g, seen := t.groups[group], t.seenVer[client]
	v, ok := seen[group]
	if g == nil || !ok || v == g.version {
		return false
	}
	if tell {
		seen[group] = g.version
	}
	return true
}

// heartbeat records a client's groups and returns the groups whose member
// list changed since the client's previous heartbeat.
func (t *consumerTable) heartbeat(client string, groups []*pb.ConsumerGroupInfo, now time.Time) []string {
	t.mu.Lock()
	bumped := t.expireLocked(now)
	defer func() { t.mu.Unlock(); t.notify(bumped) }()
	seen := t.seenVer[client]
	if seen == nil {
		seen = map[string]uint64{}
		t.seenVer[client] = seen
	}
	var changed []string
	for _, gi := range groups {
		g := t.groups[gi.Group]
		if g == nil {
			g = &consumerGroup{members: map[string]*member{}}
			t.groups[gi.Group] = g
		}
		if _, ok := g.members[client]; !ok {
			g.version++
			bumped = append(bumped, gi.Group)
			delete(t.departed[gi.Group], client)
		}
		g.members[client] = &member{last: now, info: proto.Clone(gi).(*pb.ConsumerGroupInfo)}
		if v, ok := seen[gi.Group]; ok && v != g.version {
			changed = append(changed, gi.Group)
		}
		seen[gi.Group] = g.version
	}
	return changed
}

// unregister removes a client from groups.
func (t *consumerTable) unregister(client string, groups []*pb.ConsumerGroupInfo) {
	t.mu.Lock()
	var bumped []string
	defer func() { t.mu.Unlock(); t.notify(bumped) }()
	for _, gi := range groups {
		if g := t.groups[gi.Group]; g != nil {
			if _, ok := g.members[client]; ok {
				delete(g.members, client)
				g.version++
				bumped = append(bumped, gi.Group)
				t.departedLocked(gi.Group, client, time.Now())
			}
			if len(g.members) == 0 {
				delete(t.groups, gi.Group)
			}
		}
		delete(t.seenVer[client], gi.Group)
	}
}

// expireLocked drops members past expiry and returns the groups that
// changed.
func (t *consumerTable) expireLocked(now time.Time) (changed []string) {
	for name, g := range t.groups {
		n := len(g.members)
		for c, m := range g.members {
			if now.Sub(m.last) > t.expiry {
				delete(g.members, c)
				g.version++
				t.departedLocked(name, c, now)
			}
		}
		if len(g.members) != n {
			changed = append(changed, name)
		}
		if len(g.members) == 0 {
			delete(t.groups, name)
		}
	}
	for name, d := range t.departed { // a departure is news for an expiry
		for c, at := range d {
			if now.Sub(at) > t.expiry {
				delete(d, c)
			}
		}
		if len(d) == 0 {
			delete(t.departed, name)
		}
	}
	return changed
}

// departedLocked records that client left group at now.
func (t *consumerTable) departedLocked(group, client string, now time.Time) {
	d := t.departed[group]
	if d == nil {
		d = map[string]time.Time{}
		t.departed[group] = d
	}
	if len(d) < maxDeparted {
		d[client] = now
	}
}

// departures returns the members seen leaving group in the last expiry
// (up to maxDeparted), sorted.
func (t *consumerTable) departures(group string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.departed[group]))
	for c := range t.departed[group] {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// heardFor is how long the table has been taking heartbeats at now.
func (t *consumerTable) heardFor(now time.Time) time.Duration { return now.Sub(t.started) }

// members returns a group's client ids, sorted.
func (t *consumerTable) members(group string, now time.Time) []string {
	t.mu.Lock()
	bumped := t.expireLocked(now)
	defer func() { t.mu.Unlock(); t.notify(bumped) }()
	g := t.groups[group]
	if g == nil {
		return nil
	}
	out := make([]string, 0, len(g.members))
	for c := range g.members {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// describe is the members of group (every group when ""), as their last
// heartbeats said, by group and client id.
func (t *consumerTable) describe(group string, now time.Time) []*pb.ConsumerGroupMembers {
	t.mu.Lock()
	bumped := t.expireLocked(now)
	defer func() { t.mu.Unlock(); t.notify(bumped) }()
	var out []*pb.ConsumerGroupMembers
	for name, g := range t.groups {
		if group != "" && name != group {
			continue
		}
		gm := &pb.ConsumerGroupMembers{Group: name}
		for id, m := range g.members {
			gm.Members = append(gm.Members, &pb.ConsumerMember{ClientId: id, Mode: m.info.Mode, LastHeartbeatMs: m.last.UnixMilli(),
				Subscriptions: m.info.Subscriptions, Held: m.info.Held})
		}
		slices.SortFunc(gm.Members, func(a, b *pb.ConsumerMember) int { return strings.Compare(a.ClientId, b.ClientId) })
		out = append(out, proto.Clone(gm).(*pb.ConsumerGroupMembers))
	}
	slices.SortFunc(out, func(a, b *pb.ConsumerGroupMembers) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// queueLocks are the master's locks for orderly consumption: a queue of a
// group is held by one client at a time, for a lease renewed by locking
// again (RocketMQ's RebalanceLockManager, 60 s).
type queueLocks struct {
	mu    sync.Mutex
	lease time.Duration
	held  map[lockKey]lockHolder
}

type lockKey struct {
	group, topic string
	queue        int32
}

type lockHolder struct {
	client string
	until  time.Time
}

func newQueueLocks() *queueLocks {
	return &queueLocks{lease: 60 * time.Second, held: map[lockKey]lockHolder{}}
}

// lock takes or renews the queues it can for client and returns those it
// holds.
func (l *queueLocks) lock(group, client, topic string, queues []int32, now time.Time) []int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var got []int32
	for _, q := range queues {
		k := lockKey{group, topic, q}
		h, ok := l.held[k]
		if ok && h.client != client && now.Before(h.until) {
			continue
		}
		l.held[k] = lockHolder{client: client, until: now.Add(l.lease)}
		got = append(got, q)
	}
	return got
}

func (l *queueLocks) unlock(group, client, topic string, queues []int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, q := range queues {
		k := lockKey{group, topic, q}
		if h, ok := l.held[k]; ok && h.client == client {
			delete(l.held, k)
		}
	}
}
