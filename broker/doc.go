// Package broker owns a broker replica: the Raft state machine over the
// store (fsm.go), which writes each entry's records, or, when the store is
// the Raft log, dispatches the records Raft stored there (the store as
// the Raft member's log, entrylog.go), the layouts of its entries that carry records — sends
// (sendRecordsEntry in fsm.go), idempotent producers' sends with their
// numbers (sendentry.go), and commands whose records follow them, schedule
// moves and transaction ends (commandentry.go), every one ending with its
// records — the leader loop that makes the Raft leader the group's
// master (broker.go), group commit of concurrent sends into Raft entries
// (batcher.go), the send and pull services (sendservice.go,
// pullservice.go), a producer's sends on one stream, each checked and
// answered on its own, bounded per connection, the sends a producer
// batched in one message served together by one goroutine and committed
// in one entry, and the answers that finish together sent in one
// (sendstream.go) on goroutines kept from one send to the next
// (sendworkers.go), long polling: held pulls, their caps, and their
// wake-ups by arrival, periodic check, group or all at once
// (holdservice.go), replicated metadata — topics, subscription groups,
// consumer offsets (metadata.go, offsets.go)
// — the in-memory consumer and lock tables, and the notice to a group's
// members that its members changed, in heartbeat and pull answers and by
// answering its held pulls at once, and with a member list how long the
// table has heard and who left (consumers.go), resets of a group's
// offsets and the notice that moves its live members (resets.go), retries,
// dead letters and the schedule service that moves due delayed messages in
// Raft entries holding each queue's cursor (schedule.go), timer messages —
// RocketMQ 5's TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS and DELAY —
// held in the schedule topic's fixed-delay queues, a ladder of them for
// any time within the horizon (timers.go), transactional messages — half
// messages held until their producer commits or rolls them back, ends
// and check-back counts applied through Raft only to halves still open,
// and the check-back service (transactions.go) over the replicated table
// of halves (halftable.go) and the producers' check-back streams
// (checkstreams.go), catch-up of
// a replica behind the Raft log by snapshot plus commitlog copy, to where
// the snapshot's Raft entry ends when the store is the Raft log
// (catchup.go, fsm.go install), membership changes through the master — a replica added
// as a non-voter until caught up, removed, the leadership handed over
// (membership.go), the stop of a replica whose store failed
// (storefail.go), the group's one place for its replicas' Raft logs,
// declared by its first master's announce, carried in snapshots, and the
// stop of a replica that keeps its log elsewhere (raftlogplace.go), a
// WAL group's move into the commitlog: from the move's entry the master's
// gate and every replica's state machine refuse writes (WRITES_PAUSED)
// and each replica snapshots; the move ends once every voter has moved,
// or is aborted before one has (raftlogmove.go); a replica's own move as
// it starts in the commitlog, from that snapshot, or under --raft-log
// auto once its snapshot says its group moves (raftlogconvert.go),
// RocketMQ clients' sends, heartbeats, pulls, offsets and
// queue locks over the remoting protocol on the gRPC port (over TLS when
// it has TLS), onto the native services, each call checked under access
// control as the native RPC is (remoting.go), the clients that heartbeat
// here by their connection, gRPC or remoting: consumers out of their
// groups when it ends (a killed consumer's queues go to the others at
// once), RocketMQ consumers pushed code 40 when their group's members
// change, RocketMQ producers pushed the check-backs of their group's
// halves, code 39 (clientconns.go), the transport security
// of its gRPC server and of its own calls (tls.go), the gRPC buffer pool whose tiers fit
// a batch (grpcbuffers.go), and what each RPC
// needs under access control (acl.go), the admin RPCs over topics,
// subscription groups and offsets (adminservice.go; a group new to a young
// queue starts it at 0, as RocketMQ's brokers answer, against the
// machine's memory read in memory.go), the replica's
// announcement on the cluster's gossip, by which name servers route to it,
// and its leaving the pool once removed from its group (gossip.go), its
// Prometheus metrics, consumer lag among them
// (metrics.go), its configuration with the documented defaults
// (config.go), and the gRPC statuses its errors map to (errors.go).
//
// Design choices (docs/design.md gives the whole):
//   - Raft restores its latest snapshot at start (metadata only); the
//     store, being persistent, skips log entries at or below its last Raft
//     index, and the metadata is rebuilt from snapshot plus log.
//   - A new leader serves as master only after a Barrier and an entry
//     announcing its gRPC address, which every replica uses in NOT_LEADER
//     answers.
//   - Offsets that ride on pulls are replicated in one entry per group
//     every OffsetCommitInterval; UpdateConsumerOffset waits for its entry.
//   - Consumer heartbeats and orderly-consumption locks live in memory on
//     each replica, as in RocketMQ. A consumer leaves its groups when its
//     heartbeats expire (ConsumerExpiry, 2 min) or, first, when the
//     connection it heartbeats on ends, as RocketMQ's broker drops a
//     closed channel's clients: a consumer killed with kill -9 held its
//     queues for the whole 2 minutes before (the consumer-kill drill).
//   - A message is encoded once, by its producer: the SDK sends records
//     in the layout of package message (SendMessageRequest.records), the
//     send service checks them in place (framing, CRC, topic, queue,
//     limits) without decoding a message, the batcher concatenates the
//     records of the sends it merges into one entry and stamps the store
//     time, and every replica's state machine appends those bytes
//     (sendRecordsEntry in fsm.go). Sends of protobuf messages (older
//     producers, raftmq's own tools) are encoded by the send service, once.
//   - A producer's retry is stored once, two ways. raftmq's SDK is an
//     idempotent producer, as Kafka's (KIP-98): the group issues it an id
//     and an epoch (InitProducer, a Raft entry), it numbers its messages
//     per queue, and every replica's state machine keeps, per producer and
//     queue, the highest sequence stored and a bitmap of the 256 below it
//     (producers.go); a send whose numbers are all stored is a retry, and
//     is answered with the first copy (found by its unique keys), one
//     partly stored is refused. Unlike Kafka's, sequences need not come in
//     order (a producer shared by goroutines sends them in any order), so
//     the table refuses nothing for a gap. RocketMQ's clients send no ids
//     but a unique key (UNIQ_KEY) on every message, kept on a retry: the
//     send service marks their sends (message.SysFlagDedup), and every
//     replica's store answers a marked record whose key it holds on the
//     same topic from the last DedupWindow (2 min) with the stored copy
//     (storage/dedup.go). Below a queue's sequence window the keys decide
//     for numbered sends too. What the broker writes itself (send-backs,
//     moved timers) keeps its first copy's key and is not marked. A
//     producer silent for DedupWindow is forgotten, by the store times in
//     the log rather than a replica's clock, so that every replica
//     forgets alike; the table is in the snapshot.
//   - Group commit keeps one entry in flight, and more only when they
//     are full (batcher.go says why). Once an entry finishes, the next
//     waits up to GroupCommitWait (2 ms) for the senders it answered to
//     come back, when it had several; a lone sender never waits.
//   - A replica whose store fails (a write or fdatasync error, a full disk)
//     stops for good, until restarted: its state machine applies nothing
//     after the entry it could not store (so its commitlog stays a prefix
//     of the others'), it hands leadership over if it has it and stops its
//     Raft member, which leaves the group's voting without changing its
//     configuration (a group of 3 goes on with 2), and it says so once in
//     an Error log line naming the file, on /healthz (503) and in
//     raftmq_store_failed. It refuses sends and pulls alike, and every RPC
//     but DescribeBroker, with Unavailable and STORE_ERROR (no new reason:
//     the .proto is unchanged): RocketMQ users expect a broken broker to
//     stop serving, and its clients go to another replica, as from a slave
//     that is gone. A send whose entry the failed master could not apply
//     is answered with outcome "unknown": the entry is committed, and the
//     other replicas store it. The failure is not persisted: restarted, the
//     store's recovery cuts the torn batch and the replica re-applies the
//     Raft log from there; on a disk that still fails it stops again at its
//     first write (having perhaps been elected master meanwhile: its Raft
//     log is whole).
package broker
