// Package cluster owns how nodes find and agree with each other:
//   - raft.go: the Raft group setup of a broker group (hashicorp/raft with a
//     file snapshot store and a TCP transport);
//   - logstore.go: the Raft log on hashicorp/raft-wal, raft-boltdb/v2 kept
//     for Raft's stable state (term and vote), the one-time move of a bolt
//     log into the WAL, and the completion of a segment rotation that a
//     crash interrupted;
//   - walfiler.go: raft-wal's segment filer, mended: it finds the tail that
//     interrupted rotation left sealed, and sealed segments let go of their
//     write buffers;
//   - membership.go, meta.go: gossip membership and the metadata members
//     announce;
//   - ops.go: the metrics, health and (when asked for) profiling endpoint;
//   - status.go: gRPC error statuses with typed reasons;
//   - cluster/pb: the gRPC contract.
//
// It knows no broker logic: the state machine is passed in.
package cluster
