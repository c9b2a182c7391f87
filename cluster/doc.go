// Package cluster owns how nodes find and agree with each other: the Raft
// group setup of a broker group (raft.go: hashicorp/raft with a file
// snapshot store and a TCP transport), the Raft log store (logstore.go:
// hashicorp/raft-wal, with raft-boltdb/v2 kept for Raft's stable state, the
// one-time move of a bolt log into the WAL, and the completion of a segment
// rotation that a crash interrupted; walfiler.go: segments that let go of
// their write buffers once sealed, and the interrupted rotation found),
// gossip membership (membership.go,
// meta.go), the metrics and health endpoint (ops.go), gRPC error statuses
// with typed reasons (status.go), and the
// gRPC contract in cluster/pb. It knows no broker logic: the state machine
// is passed in.
package cluster
