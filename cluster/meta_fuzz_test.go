package cluster

import (
	"testing"
)

// FuzzDecodeMemberMeta: gossip metadata comes from any peer that can
// reach the gossip port (with a key, one that has it). Decoding never
// panics, what decodes is within Encode's caps, and it decodes to itself
// once encoded again.
func FuzzDecodeMemberMeta(f *testing.F) {
	for _, m := range []MemberMeta{
		{Role: RoleBroker, Cluster: "raftmq", Group: "broker-a", ReplicaID: 2, GRPCAddr: "10.0.0.1:10911", Leader: true, Term: 7, TopicsVersion: 12},
		{Role: RoleNameServer, Cluster: "c", GRPCAddr: "ns:9876"},
	} {
		b, err := m.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{metaVersion})
	f.Add([]byte{metaVersion, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMemberMeta(b)
		if err != nil {
			return
		}
		again, err := m.Encode()
		if err != nil {
			t.Fatalf("decoded %+v, which Encode refuses: %v", m, err)
		}
		back, err := DecodeMemberMeta(again)
		if err != nil || back != m {
			t.Fatalf("decoded %+v, encoded again and decoded %+v (%v)", m, back, err)
		}
	})
}
