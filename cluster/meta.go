package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Role is what a gossip member is.
type Role uint8

const (
	RoleNameServer Role = 1
	RoleBroker     Role = 2
)

func (r Role) String() string {
	switch r {
	case RoleNameServer:
		return "namesrv"
	case RoleBroker:
		return "broker"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// MemberMeta is what a member tells the gossip pool about itself. It
// travels in memberlist's node metadata, which must stay within
// MaxMetaSize bytes (memberlist panics beyond 512), so it is a compact
// binary encoding with a version byte, and Encode refuses what does not
// fit.
type MemberMeta struct {
	Role      Role
	Cluster   string // the cluster's name
	GRPCAddr  string // where the member serves gRPC
	Group     string // brokers: the broker group
	ReplicaID int32  // brokers: the replica id in the group
	Leader    bool   // brokers: claims to be the group's master
	Term      uint64 // brokers: the Raft term of the claim
	// TopicsVersion is a broker's topic table version; name servers fetch
	// the table again when it changes.
	TopicsVersion int64
}

const (
	metaVersion = 1
	// MaxMetaSize is memberlist's limit on node metadata.
	MaxMetaSize = 512
	// Field caps that keep any MemberMeta under MaxMetaSize.
	maxMetaName = 127
	maxMetaAddr = 200
)

// Encode returns m's wire form, or an error when a field is too long.
func (m MemberMeta) Encode() ([]byte, error) {
	if len(m.Cluster) > maxMetaName || len(m.Group) > maxMetaName || len(m.GRPCAddr) > maxMetaAddr {
		return nil, fmt.Errorf("cluster: member metadata: names are capped at %d bytes and addresses at %d", maxMetaName, maxMetaAddr)
	}
	b := make([]byte, 0, 64+len(m.Cluster)+len(m.Group)+len(m.GRPCAddr))
	b = append(b, metaVersion, byte(m.Role))
	for _, s := range []string{m.Cluster, m.GRPCAddr, m.Group} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendVarint(b, int64(m.ReplicaID))
	leader := byte(0)
	if m.Leader {
		leader = 1
	}
	b = append(b, leader)
	b = binary.AppendUvarint(b, m.Term)
	b = binary.AppendVarint(b, m.TopicsVersion)
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("cluster: member metadata of %d bytes exceeds %d", len(b), MaxMetaSize)
	}
	return b, nil
}

var errBadMeta = errors.New("cluster: undecodable member metadata")

// DecodeMemberMeta reads what Encode wrote. Later versions may append
// fields; this version ignores them.
func DecodeMemberMeta(b []byte) (MemberMeta, error) {
	var m MemberMeta
	if len(b) < 2 || b[0] < metaVersion {
		return m, errBadMeta
	}
	m.Role = Role(b[1])
	p := 2
	str := func() (string, bool) {
		n, k := binary.Uvarint(b[p:])
		if k <= 0 || n > uint64(len(b)-p-k) {
			return "", false
		}
		p += k
		s := string(b[p : p+int(n)])
		p += int(n)
		return s, true
	}
	var ok1, ok2, ok3 bool
	m.Cluster, ok1 = str()
	m.GRPCAddr, ok2 = str()
	m.Group, ok3 = str()
	if !ok1 || !ok2 || !ok3 || len(m.Cluster) > maxMetaName || len(m.Group) > maxMetaName || len(m.GRPCAddr) > maxMetaAddr {
		return MemberMeta{}, errBadMeta // what Encode would not have written
	}
	id, k := binary.Varint(b[p:])
	if k <= 0 || p+k >= len(b) {
		return MemberMeta{}, errBadMeta
	}
	p += k
	m.ReplicaID = int32(id)
	m.Leader = b[p] == 1
	p++
	term, k := binary.Uvarint(b[p:])
	if k <= 0 {
		return MemberMeta{}, errBadMeta
	}
	p += k
	m.Term = term
	v, k := binary.Varint(b[p:])
	if k <= 0 {
		return MemberMeta{}, errBadMeta
	}
	m.TopicsVersion = v
	return m, nil
}
