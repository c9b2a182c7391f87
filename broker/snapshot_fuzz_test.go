package broker

import (
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster/pb"
)

// FuzzSnapshotRestore: a snapshot is read from disk at start and from the
// leader when a replica falls behind. Whatever decodes restores without
// a panic, and restoring is a fixed point: the metadata's snapshot,
// restored again, gives the same snapshot.
func FuzzSnapshotRestore(f *testing.F) {
	seed := &pb.BrokerSnapshot{
		Topics:          []*pb.TopicConfig{{Name: "orders", ReadQueues: 4, WriteQueues: 4, Perm: 6}, {Name: "audit", ReadQueues: 1, WriteQueues: 1}},
		TopicsVersion:   3,
		Groups:          []*pb.SubscriptionGroupConfig{{Name: "g"}},
		Offsets:         []*pb.OffsetCommit{{ConsumerGroup: "g", Offsets: []*pb.QueueOffset{{Topic: "orders", QueueId: 1, Offset: 42}}}},
		Masters:         []*pb.MasterAnnounce{{ReplicaId: 1, GrpcAddress: "127.0.0.1:10911"}},
		ScheduleOffsets: map[int32]int64{3: 7},
		StoreRaftIndex:  99,
	}
	b, err := proto.Marshal(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var s pb.BrokerSnapshot
		if proto.Unmarshal(data, &s) != nil {
			return
		}
		m := newMetadata(testWindow, 10)
		m.restore(&s)
		var again pb.BrokerSnapshot
		m.snapshot(&again)
		m2 := newMetadata(testWindow, 10)
		m2.restore(&again)
		if why := differ(m, m2); why != "" {
			t.Fatalf("restore is not a fixed point: %s", why)
		}
	})
}

// differ says how two metadata differ ("" when they do not); snapshots
// list maps in no set order, so the metadata are compared.
func differ(a, b *metadata) string {
	switch {
	case a.topicsVersion != b.topicsVersion:
		return "topics version"
	case !maps.EqualFunc(a.topics, b.topics, func(x, y *pb.TopicConfig) bool { return proto.Equal(x, y) }):
		return "topics"
	case !maps.EqualFunc(a.groups, b.groups, func(x, y *pb.SubscriptionGroupConfig) bool { return proto.Equal(x, y) }):
		return "groups"
	case !maps.Equal(a.offsets, b.offsets):
		return "offsets"
	case !maps.Equal(a.replicas, b.replicas):
		return "masters"
	case !maps.Equal(a.schedule, b.schedule):
		return "schedule offsets"
	}
	return ""
}
