// Package broker owns a broker replica: the Raft state machine over the
// store (fsm.go), the leader loop that makes the Raft leader the group's
// master (broker.go), group commit of concurrent sends into Raft entries
// (batcher.go), the send and pull services (sendservice.go,
// pullservice.go), long polling (holdservice.go), replicated metadata —
// topics, subscription groups, consumer offsets (metadata.go, offsets.go)
// — the in-memory consumer and lock tables (consumers.go), and catch-up of
// a replica behind the Raft log by snapshot plus commitlog copy
// (catchup.go).
//
// Design choices, where ARCHITECTURE.md leaves room:
//   - Raft restores its latest snapshot at start (metadata only); the
//     store, being persistent, skips log entries at or below its last Raft
//     index, and the metadata is rebuilt from snapshot plus log.
//   - A new leader serves as master only after a Barrier and an entry
//     announcing its gRPC address, which every replica uses in NOT_LEADER
//     answers.
//   - Offsets that ride on pulls are replicated in one entry per group
//     every OffsetCommitInterval; UpdateConsumerOffset waits for its entry.
//   - Consumer heartbeats and orderly-consumption locks live in memory on
//     each replica, as in RocketMQ.
package broker
