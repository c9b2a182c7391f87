package broker

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster"
)

// GossipConfig puts a replica in the cluster's gossip pool, where name
// servers learn about it: its identity and address, whether it is master
// and at which Raft term, and its topic table's version.
type GossipConfig struct {
	// BindAddr enables gossip ("" leaves it off); AdvertiseAddr is what
	// others reach.
	BindAddr      string
	AdvertiseAddr string
	// Join lists members (name servers, other brokers) to join.
	Join []string
	// Cluster is the cluster's name. Default "raftmq".
	Cluster   string
	SecretKey []byte
	// Fast uses test timings.
	Fast bool
	// RefreshInterval is how often the replica checks whether what it
	// announces changed. Default 200 ms (100 ms with Fast).
	RefreshInterval time.Duration
}

func (b *Broker) gossipMeta() cluster.MemberMeta {
	_, version := b.meta.topicList()
	m := cluster.MemberMeta{
		Role: cluster.RoleBroker, Cluster: b.cfg.Gossip.Cluster, GRPCAddr: b.cfg.AdvertiseGRPC,
		Group: b.cfg.Group, ReplicaID: b.self, TopicsVersion: version,
	}
	if b.master.Load() {
		m.Leader, m.Term = true, b.term()
	}
	return m
}

// startGossip joins the pool when configured.
func (b *Broker) startGossip() error {
	g := &b.cfg.Gossip
	if g.BindAddr == "" {
		return nil
	}
	ms, err := cluster.StartMembership(cluster.MembershipConfig{
		Name: b.cfg.Group + "-" + b.cfg.Raft.ID, BindAddr: g.BindAddr, AdvertiseAddr: g.AdvertiseAddr,
		Join: g.Join, SecretKey: g.SecretKey, Fast: g.Fast, Meta: b.gossipMeta(), Logger: b.log,
	})
	if err != nil {
		return err
	}
	b.ms = ms
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for range ms.Events { // brokers need no events; the queue must drain
		}
	}()
	b.goLoop(b.gossipLoop)
	return nil
}

// gossipLoop announces changes of what the replica tells the pool, until
// the replica is removed from its group.
func (b *Broker) gossipLoop(ctx context.Context) {
	last := b.gossipMeta()
	member, left := false, false
	every(ctx, b.cfg.Gossip.RefreshInterval, func(time.Time) {
		if left {
			return
		}
		if left = b.removedFromGroup(&member); left {
			b.leaveGossip()
			return
		}
		m := b.gossipMeta()
		if m == last {
			return
		}
		if err := b.ms.UpdateMeta(m); err != nil {
			// Usually memberlist not confirming the broadcast in time
			// (the pool is still forming); the update is queued, and the
			// next tick tries again.
			b.log.Debug("gossip metadata update not confirmed", "err", err)
			return
		}
		last = m
	})
}

// removedFromGroup says whether this replica was taken out of its group's
// Raft configuration (group remove-replica) while it runs: this process
// saw itself in the configuration (*member, kept by the caller), and the
// latest one leaves it out. (A replica joining with --join-group reads its
// group's older configurations, without it, as it catches up: that is not
// a removal.)
func (b *Broker) removedFromGroup(member *bool) bool {
	servers, err := b.servers()
	if err != nil || len(servers) == 0 {
		return false
	}
	self := raft.ServerID(b.cfg.Raft.ID)
	for _, s := range servers {
		if s.ID == self {
			*member = true
			return false
		}
	}
	return *member
}

// leaveGossip takes a removed replica out of the gossip pool, so that name
// servers drop it from routes and cluster listings; it keeps running, with
// its data, until its operator stops it. Before, it went on announcing
// itself as a slave of the group it had left.
func (b *Broker) leaveGossip() {
	b.log.Warn("this replica was removed from its group: it leaves the gossip pool, and no longer serves the group; stop it",
		"group", b.cfg.Group, "replica", b.self)
	if err := b.ms.Close(); err != nil {
		b.log.Warn("leaving gossip", "err", err)
	}
}
