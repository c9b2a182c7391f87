package broker

import (
	"context"
	"time"

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

// gossipLoop announces changes of what the replica tells the pool.
func (b *Broker) gossipLoop(ctx context.Context) {
	last := b.gossipMeta()
	every(ctx, b.cfg.Gossip.RefreshInterval, func(time.Time) {
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
