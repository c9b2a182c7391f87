package namesrv

import (
	"sort"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
)

// routeTable is what a name server knows: the live members of the gossip
// pool with their metadata, and each broker group's topic table as last
// fetched from one of its replicas. Routes are derived from both on
// demand. Nothing is on disk: a restarted name server learns it all again
// from gossip and the brokers.
type routeTable struct {
	mu      sync.Mutex
	members map[string]cluster.MemberEvent // by member name
	tables  map[string]*topicTable         // by broker group
	changed chan struct{}                  // closed and replaced on every change
	// confirming: a broker member counts (in routes, as a replica to
	// fetch from) only while its current claim is the one confirmed over
	// mutual TLS (claims.go). Set on a name server with TLS.
	confirming bool
	confirmed  map[string]claim // by member name
}

type topicTable struct {
	version int64
	topics  map[string]*pb.TopicConfig
}

func newRouteTable(confirming bool) *routeTable {
	return &routeTable{members: map[string]cluster.MemberEvent{}, tables: map[string]*topicTable{}, changed: make(chan struct{}),
		confirming: confirming, confirmed: map[string]claim{}}
}

// notifyLocked wakes route watchers. Caller holds mu.
func (t *routeTable) notifyLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// watch returns a channel closed at the next change.
func (t *routeTable) watch() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// apply records a membership event. It returns the broker members whose
// group's topic table should be fetched (their version is not the one
// held).
func (t *routeTable) apply(e cluster.MemberEvent) []cluster.MemberEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.Kind == cluster.MemberLeft {
		delete(t.members, e.Name)
		delete(t.confirmed, e.Name)
	} else {
		t.members[e.Name] = e
	}
	t.notifyLocked()
	return t.staleLocked()
}

// stale returns, per group whose table is behind a live replica's
// announced version, the replica announcing the highest version.
func (t *routeTable) stale() []cluster.MemberEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.staleLocked()
}

func (t *routeTable) staleLocked() []cluster.MemberEvent {
	best := map[string]cluster.MemberEvent{}
	for _, m := range t.members {
		if m.Meta.Role != cluster.RoleBroker || !t.countsLocked(m) {
			continue
		}
		tab := t.tables[m.Meta.Group]
		if tab != nil && tab.version >= m.Meta.TopicsVersion {
			continue
		}
		if b, ok := best[m.Meta.Group]; !ok || m.Meta.TopicsVersion > b.Meta.TopicsVersion {
			best[m.Meta.Group] = m
		}
	}
	out := make([]cluster.MemberEvent, 0, len(best))
	for _, m := range best {
		out = append(out, m)
	}
	return out
}

// unfetched reports whether a live broker group's topic table has not
// been fetched at all yet.
func (t *routeTable) unfetched() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range t.members {
		if m.Meta.Role == cluster.RoleBroker && t.countsLocked(m) && t.tables[m.Meta.Group] == nil {
			return true
		}
	}
	return false
}

// setTopics stores a group's topic table unless a newer one is held.
func (t *routeTable) setTopics(group string, version int64, topics []*pb.TopicConfig) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tab := t.tables[group]; tab != nil && tab.version >= version {
		return
	}
	tab := &topicTable{version: version, topics: map[string]*pb.TopicConfig{}}
	for _, tc := range topics {
		tab.topics[tc.Name] = tc
	}
	t.tables[group] = tab
	t.notifyLocked()
}

// groupView is a broker group's live replicas and its master.
type groupView struct {
	name     string
	replicas []*pb.ReplicaInfo
	masterID int32
	term     uint64
}

// groupsLocked derives the live groups from the members: the master is the
// replica claiming leadership with the highest Raft term (during a
// handover the old master's claim may linger in gossip for a moment).
func (t *routeTable) groupsLocked() map[string]*groupView {
	views := map[string]*groupView{}
	for _, m := range t.members {
		if m.Meta.Role != cluster.RoleBroker || !t.countsLocked(m) {
			continue
		}
		g := views[m.Meta.Group]
		if g == nil {
			g = &groupView{name: m.Meta.Group}
			views[m.Meta.Group] = g
		}
		g.replicas = append(g.replicas, &pb.ReplicaInfo{Id: m.Meta.ReplicaID, GrpcAddress: m.Meta.GRPCAddr})
		if m.Meta.Leader && m.Meta.Term >= g.term {
			g.masterID, g.term = m.Meta.ReplicaID, m.Meta.Term
		}
	}
	for _, g := range views {
		sort.Slice(g.replicas, func(i, j int) bool { return g.replicas[i].Id < g.replicas[j].Id })
		for _, r := range g.replicas {
			r.Master = r.Id == g.masterID
		}
	}
	return views
}

// route is the topic's route now (no groups: unknown topic).
func (t *routeTable) route(topic string) *pb.RouteResponse {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := &pb.RouteResponse{Topic: topic}
	for name, g := range t.groupsLocked() {
		tab := t.tables[name]
		if tab == nil {
			continue
		}
		tc := tab.topics[topic]
		if tc == nil {
			continue
		}
		out.Groups = append(out.Groups, &pb.GroupRoute{
			Group: name, ReadQueues: tc.ReadQueues, WriteQueues: tc.WriteQueues, Perm: tc.Perm,
			Replicas: g.replicas, MasterId: g.masterID, Term: g.term,
		})
	}
	sort.Slice(out.Groups, func(i, j int) bool { return out.Groups[i].Group < out.Groups[j].Group })
	return proto.Clone(out).(*pb.RouteResponse)
}

// clusterInfo lists the live groups and name servers.
func (t *routeTable) clusterInfo(cluster string) *pb.ClusterInfoResponse {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := &pb.ClusterInfoResponse{Cluster: cluster}
	for name, g := range t.groupsLocked() {
		cg := &pb.ClusterGroup{Group: name, Replicas: g.replicas, MasterId: g.masterID, Term: g.term}
		if tab := t.tables[name]; tab != nil {
			cg.TopicsVersion = tab.version
			for tn := range tab.topics {
				cg.Topics = append(cg.Topics, tn)
			}
			sort.Strings(cg.Topics)
		}
		out.Groups = append(out.Groups, cg)
	}
	sort.Slice(out.Groups, func(i, j int) bool { return out.Groups[i].Group < out.Groups[j].Group })
	for _, m := range t.members {
		if m.Meta.Role == roleNameServer {
			out.NameServers = append(out.NameServers, m.Meta.GRPCAddr)
		}
	}
	sort.Strings(out.NameServers)
	return proto.Clone(out).(*pb.ClusterInfoResponse)
}

// topicNames lists the topics of the live groups.
func (t *routeTable) topicNames() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	set := map[string]bool{}
	for name := range t.groupsLocked() {
		if tab := t.tables[name]; tab != nil {
			for tn := range tab.topics {
				set[tn] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for tn := range set {
		out = append(out, tn)
	}
	sort.Strings(out)
	return out
}

const roleNameServer = cluster.RoleNameServer
