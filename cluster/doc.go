// Package cluster owns how nodes find and agree with each other:
//   - raft.go: the Raft group setup of a broker group (hashicorp/raft with a
//     file snapshot store and a TCP transport, or mutual TLS), and which of
//     the state machine's restores are of its own snapshots at start
//     (SnapshotAtStart) rather than a leader's;
//   - appendstream.go: the member's transport: AppendEntries with entries
//     or a commit index on connections of the member's own (member
//     streams), heartbeats, votes and snapshots on hashicorp/raft's
//     NetworkTransport, both on one listener that tells them apart by a
//     connection's first byte, and Raft's requests of both on one channel;
//   - appendcodec.go: the member streams' wire form of an AppendEntries
//     and its answer: each entry's bytes read from the socket into the
//     slice it keeps and written from it, every length bounded before
//     anything is allocated for it (MaxEntryBytes);
//   - raftstream.go: the Raft transport's stream layer over mutual TLS,
//     which accepts and dials only replicas of the member's own group and
//     handshakes off hashicorp/raft's accept loop;
//   - tls.go: nodes' and clients' TLS: the identities certificates name
//     (raftmq://CLUSTER/broker/GROUP/ID, /namesrv/ID, /user/NAME) and the
//     TLS 1.3 configurations that check them on every handshake;
//   - certs.go: a cluster's private CA and the certificates it issues
//     (raftmq certs);
//   - acl.go: access control, deny by default: a policy file read again
//     when it changes, the decision for a caller's identity and what a
//     call needs, and the interceptor (unary and stream) that enforces a
//     server's method table;
//   - accesskey.go: requests signed with access keys (the format is
//     cluster/pb's): the signature checked against the policy's secret and
//     this node's identity, stale timestamps and replayed nonces refused,
//     with a bounded window of what was seen per signing session;
//   - rocketmqsig.go: RocketMQ's access-key signature on remoting requests
//     (HMAC-SHA1 over the fields' values and the body, replayable, so only
//     over TLS), the caller of a remoting request, and the check a gateway
//     makes of each native call it makes (CheckCall);
//   - logstore.go: the member's Raft log, in the WAL or, when its
//     configuration names an EntryLog, in the commitlog, each member kept
//     on the one it began with (a marker file, written before anything
//     else of the member's), where a directory says its member keeps it
//     (RaftLogInCommitlog: the commitlog for a new one) and the refusal of
//     the other (CheckRaftLogPlace, which a broker asks before its store
//     opens); the log on
//     hashicorp/raft-wal, raft-boltdb/v2 kept for Raft's stable state
//     (term and vote), the one-time move of a bolt log into the WAL, and
//     the completion of a segment rotation that a crash interrupted;
//   - commitloglog.go: a Raft log store over a broker's commitlog (an
//     EntryLog): each entry's records where consumers read them, the rest
//     of the entry in a frame before them; a suffix deleted is cut, a
//     prefix only forgotten; at start the EntryLog indexes what Raft will
//     read (docs/commitlog-raft-log.md);
//   - walmove.go: a member's move from its WAL into the commitlog as it
//     starts there, its group's writes paused: the WAL's entries after
//     the move's stored as frames (StoreWALEntries), then the commitlog's
//     marker and the WAL gone (FinishWALMove), behind a marker of the
//     move's own, so a crash on the way leaves a start to move again, in
//     the commitlog only;
//   - leaderlog.go: the leader's Raft log written beside replication
//     rather than before it (a queue and one writer while leading), with
//     the commit index sent to followers and the leader's own applies held
//     to what its log holds durably, so every applied entry is on a
//     majority of disks; a failed write stops the member;
//   - entrychecksum.go: a CRC-32C of every proposed entry's data, carried in
//     the entry (raft-wal checks none inside a segment), checked where an
//     entry is applied (a damaged one stops the member, naming its
//     segment) and where a leader reads one to replicate it (never sent;
//     the leader stops);
//   - sparefollowers.go: when RaftConfig.SpareFollowerInterval is set
//     (raftmq broker sets it for a group on one host), the leader's
//     entries sent at once only to the followers a commit waits for; a
//     spare (in a group of three, the follower behind) gets what came in
//     one request every interval, and as soon as an entry has waited 2 ms
//     for those ahead of it; a request carrying an entry of 8 KiB or more
//     goes to every follower at once;
//   - heartbeatgate.go: Raft's heartbeat fast path only for a follower of
//     the heartbeat's own term: one of a newer term, handled beside the
//     Raft loop, made a leader append entries in a term it never led
//     (hashicorp/raft #695); the gate holds the member's Raft, and hands
//     its latest configuration to the spare pacer;
//   - pipeline.go: pipelined replication (RaftConfig.MaxRPCsInFlight, off
//     by default) that cannot wedge when a follower fails a request,
//     as hashicorp/raft's own pipeline can;
//   - stablestore.go: Raft's stable store (term and vote), closed only
//     once no write is in flight (a heartbeat handled as the node closes);
//   - walfiler.go: raft-wal's segment filer, mended: it finds the tail that
//     interrupted rotation left sealed, and sealed segments let go of their
//     write buffers;
//   - membership.go, meta.go: gossip membership (a failed join is retried
//     until it succeeds) and the metadata members announce;
//   - ops.go: the metrics, health and (when asked for) profiling endpoint
//     (a collector that fails costs its own series, not the page);
//   - raftmetrics.go: hashicorp/raft's and memberlist's own timings
//     (go-metrics, one sink a process) exported to a Prometheus registry
//     through a sink of our own that counts without allocating;
//   - status.go: the bound on the messages servers send back
//     (BoundErrors);
//   - cluster/pb: the gRPC contract, with its error statuses (typed
//     reasons: pb.StatusError, pb.ReasonOf), which the SDK imports
//     without this package.
//
// It knows no broker logic: the state machine is passed in.
package cluster
