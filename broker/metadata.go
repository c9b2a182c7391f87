package broker

import (
	"maps"
	"sort"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster/pb"
)

type offsetKey struct {
	group, topic string
	queue        int32
}

// metadata is the replicated state next to the commitlog: topics,
// subscription groups, committed consumer offsets, and the gRPC addresses
// masters announced. The state machine changes it (in Raft order, on every
// replica); services read it.
type metadata struct {
	mu            sync.RWMutex
	topics        map[string]*pb.TopicConfig
	topicsVersion int64
	groups        map[string]*pb.SubscriptionGroupConfig
	offsets       map[offsetKey]int64
	replicas      map[int32]string // replica id -> gRPC address, from master announcements
	schedule      map[int32]int64  // delay level -> next offset of its schedule queue
	halves        *halfTable       // transactional half messages (its own lock)
	producers     *producerTable   // idempotent producers' sequences (its own lock)
}

// newMetadata is empty metadata whose producer table forgets a producer
// after dedupWindow ms of silence and remembers at most maxProducers.
func newMetadata(dedupWindow int64, maxProducers int) *metadata {
	return &metadata{
		topics:    map[string]*pb.TopicConfig{},
		groups:    map[string]*pb.SubscriptionGroupConfig{},
		offsets:   map[offsetKey]int64{},
		replicas:  map[int32]string{},
		schedule:  map[int32]int64{},
		halves:    newHalfTable(),
		producers: newProducerTable(dedupWindow, maxProducers),
	}
}

func (m *metadata) topic(name string) *pb.TopicConfig {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.topics[name]
}

// topicList returns copies of the topics, by name, and the table's version.
func (m *metadata) topicList() ([]*pb.TopicConfig, int64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*pb.TopicConfig, 0, len(m.topics))
	for _, t := range m.topics {
		out = append(out, proto.Clone(t).(*pb.TopicConfig))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, m.topicsVersion
}

func (m *metadata) upsertTopic(t *pb.TopicConfig) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.topics[t.Name] = proto.Clone(t).(*pb.TopicConfig)
	m.topicsVersion++
}

func (m *metadata) deleteTopic(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.topics, name)
	for k := range m.offsets {
		if k.topic == name {
			delete(m.offsets, k)
		}
	}
	m.topicsVersion++
}

func (m *metadata) group(name string) *pb.SubscriptionGroupConfig {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.groups[name]
}

func (m *metadata) groupList() []*pb.SubscriptionGroupConfig {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*pb.SubscriptionGroupConfig, 0, len(m.groups))
	for _, g := range m.groups {
		out = append(out, proto.Clone(g).(*pb.SubscriptionGroupConfig))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (m *metadata) upsertGroup(g *pb.SubscriptionGroupConfig) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.groups[g.Name] = proto.Clone(g).(*pb.SubscriptionGroupConfig)
}

func (m *metadata) deleteGroup(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.groups, name)
	for k := range m.offsets {
		if k.group == name {
			delete(m.offsets, k)
		}
	}
}

// offset returns a group's committed offset of a queue, -1 when none.
func (m *metadata) offset(group, topic string, queue int32) int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if off, ok := m.offsets[offsetKey{group, topic, queue}]; ok {
		return off
	}
	return -1
}

// committedOffsets copies every committed consumer offset.
func (m *metadata) committedOffsets() map[offsetKey]int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return maps.Clone(m.offsets)
}

func (m *metadata) commitOffsets(c *pb.OffsetCommit) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range c.Offsets {
		m.offsets[offsetKey{c.ConsumerGroup, o.Topic, o.QueueId}] = o.Offset
	}
}

// scheduleOffset is where the schedule service resumes a delay level.
func (m *metadata) scheduleOffset(level int32) int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.schedule[level]
}

// scheduleAt reports whether the schedule cursors are at from, the
// cursors a move was read from.
func (m *metadata) scheduleAt(from map[int32]int64) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for level, off := range from {
		if m.schedule[level] != off {
			return false
		}
	}
	return true
}

func (m *metadata) setScheduleOffsets(offs map[int32]int64) {
	if len(offs) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for level, off := range offs {
		m.schedule[level] = off
	}
}

func (m *metadata) announce(a *pb.MasterAnnounce) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.replicas[a.ReplicaId] = a.GrpcAddress
}

func (m *metadata) replicaAddr(id int32) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.replicas[id]
}

// snapshot fills the metadata part of a snapshot.
func (m *metadata) snapshot(s *pb.BrokerSnapshot) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, t := range m.topics {
		s.Topics = append(s.Topics, proto.Clone(t).(*pb.TopicConfig))
	}
	s.TopicsVersion = m.topicsVersion
	for _, g := range m.groups {
		s.Groups = append(s.Groups, proto.Clone(g).(*pb.SubscriptionGroupConfig))
	}
	byGroup := map[string]*pb.OffsetCommit{}
	for k, off := range m.offsets {
		c := byGroup[k.group]
		if c == nil {
			c = &pb.OffsetCommit{ConsumerGroup: k.group}
			byGroup[k.group] = c
			s.Offsets = append(s.Offsets, c)
		}
		c.Offsets = append(c.Offsets, &pb.QueueOffset{Topic: k.topic, QueueId: k.queue, Offset: off})
	}
	for id, addr := range m.replicas {
		s.Masters = append(s.Masters, &pb.MasterAnnounce{ReplicaId: id, GrpcAddress: addr})
	}
	s.ScheduleOffsets = map[int32]int64{}
	for level, off := range m.schedule {
		s.ScheduleOffsets[level] = off
	}
	s.Transactions = m.halves.snapshot()
	s.Producers = m.producers.snapshot()
}

// restore replaces the metadata with a snapshot's.
func (m *metadata) restore(s *pb.BrokerSnapshot) {
	fresh := newMetadata(0, 0) // its maps; the two tables restore in place
	for _, t := range s.Topics {
		fresh.topics[t.Name] = t
	}
	fresh.topicsVersion = s.TopicsVersion
	for _, g := range s.Groups {
		fresh.groups[g.Name] = g
	}
	for _, c := range s.Offsets {
		for _, o := range c.Offsets {
			fresh.offsets[offsetKey{c.ConsumerGroup, o.Topic, o.QueueId}] = o.Offset
		}
	}
	for _, a := range s.Masters {
		fresh.replicas[a.ReplicaId] = a.GrpcAddress
	}
	for level, off := range s.ScheduleOffsets {
		fresh.schedule[level] = off
	}
	m.halves.restore(s.Transactions)
	m.producers.restore(s.Producers)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.topics, m.topicsVersion, m.groups, m.offsets, m.replicas, m.schedule = fresh.topics, fresh.topicsVersion, fresh.groups, fresh.offsets, fresh.replicas, fresh.schedule
}
