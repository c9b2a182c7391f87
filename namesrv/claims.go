package namesrv

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
)

// Gossip says where to look; mutual TLS says who answered. Anyone holding
// the gossip key can join the pool and announce "replica 9 of broker-a,
// master at term 1000" (memberlist's encryption authenticates the pool,
// not its members). So a name server with TLS lets a broker member count
// only once its claim is confirmed: it calls the claimed address, the
// certificate there must name that group and replica (brokerCreds), and
// the replica's own answer must say the same: its group and id and, for a
// master claim, that it is master at that term or a later one. Every
// change of the claim is confirmed again before it counts, but for one
// that claims less than the confirmed one: a master become follower, at
// the same address as the same replica, counts at once. A follower's term
// is no part of its claim (routes do not depend on it), so elections do
// not take followers out of routes while they are confirmed again.

// claim is what of a broker member's gossip routes depend on.
type claim struct {
	addr   string
	group  string
	id     int32
	leader bool
	term   uint64
}

func claimOf(m cluster.MemberMeta) claim {
	c := claim{addr: m.GRPCAddr, group: m.Group, id: m.ReplicaID, leader: m.Leader}
	if m.Leader {
		c.term = m.Term
	}
	return c
}

// within reports whether claim c claims nothing that confirmed does not:
// the same, or the same replica at the same address as a follower.
func (c claim) within(confirmed claim) bool {
	return c == confirmed || !c.leader && c.addr == confirmed.addr && c.group == confirmed.group && c.id == confirmed.id
}

// countsLocked reports whether member m counts: its claim is confirmed,
// or claims need no confirming. Caller holds mu.
func (t *routeTable) countsLocked(m cluster.MemberEvent) bool {
	if !t.confirming || m.Meta.Role != cluster.RoleBroker {
		return true
	}
	c, ok := t.confirmed[m.Name]
	return ok && claimOf(m.Meta).within(c)
}

// unconfirmed lists the broker members whose current claim is not
// confirmed.
func (t *routeTable) unconfirmed() []cluster.MemberEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.confirming {
		return nil
	}
	var out []cluster.MemberEvent
	for _, m := range t.members {
		if m.Meta.Role == cluster.RoleBroker && !t.countsLocked(m) {
			out = append(out, m)
		}
	}
	return out
}

// confirm records c as member name's confirmed claim; routes change when
// it is still the member's claim.
func (t *routeTable) confirm(name string, c claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.members[name]
	if !ok {
		return
	}
	t.confirmed[name] = c
	if claimOf(m.Meta).within(c) {
		t.notifyLocked()
	}
}

// confirmClaims checks, in the background, every claim not confirmed yet:
// one check per member at a time, again on the next refresh after a
// failure.
func (s *Server) confirmClaims() {
	for _, m := range s.table.unconfirmed() {
		s.inBackground(s.confirmingClaims, m.Name, func() {
			if err := s.confirmClaim(m); err != nil {
				s.claimsRefused.Add(1)
				s.log.Warn("gossip claim not confirmed: the member does not count", "member", m.Name, "addr", m.Meta.GRPCAddr,
					"group", m.Meta.Group, "replica", m.Meta.ReplicaID, "leader", m.Meta.Leader, "term", m.Meta.Term, "err", err)
			}
		})
	}
}

func (s *Server) confirmClaim(m cluster.MemberEvent) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.FetchTimeout)
	defer cancel()
	d, err := s.describe(ctx, m.Meta)
	if err != nil {
		return err
	}
	switch {
	case d.Group != m.Meta.Group || d.ReplicaId != m.Meta.ReplicaID:
		return fmt.Errorf("the replica there is %d of %s", d.ReplicaId, d.Group)
	case m.Meta.Leader && (!d.Master || d.Term < m.Meta.Term):
		return fmt.Errorf("it claims master at term %d; it answers master %v at term %d", m.Meta.Term, d.Master, d.Term)
	}
	s.table.confirm(m.Name, claimOf(m.Meta))
	s.table.setTopics(d.Group, d.TopicsVersion, d.Topics)
	return nil
}

// describe asks the replica m names to describe itself, over mutual TLS
// with the replica's certificate checked when the name server has TLS.
func (s *Server) describe(ctx context.Context, m cluster.MemberMeta) (*pb.DescribeBrokerResponse, error) {
	conn, err := grpc.NewClient(m.GRPCAddr, s.brokerCreds(m))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return pb.NewBrokerClient(conn).DescribeBroker(ctx, &pb.DescribeBrokerRequest{})
}
