package broker

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// recvBuffers is the gRPC server's buffer pool: gRPC's default one with
// more tiers between 32 KiB and 8 MiB. gRPC gathers a received message
// into one buffer from its pool and clears the buffer's whole capacity
// first; its default tiers jump from 32 KiB to 1 MiB, so every send of a
// batch (64 records of 1 KiB: 70 KB) cleared 1 MiB. That was 5.5% of the
// master's CPU under batched publish (a CPU profile, `deploy/bench-local.sh
// --profile`, 2026-12-02: runtime.memclrNoHeapPointers under
// sizedBufferPool.Get, from codecV2.Unmarshal). With a tier at every power
// of two a buffer is at most twice its message, and is still cleared, as
// gRPC means it to be (grpc-go #8910: so that no reader sees an earlier
// message's bytes).
func recvBuffers() grpc.ServerOption {
	return experimental.BufferPool(BufferPool())
}

// BufferPool is a pool of gRPC buffers with those tiers. A process that
// is mostly a broker (cmd/raftmq) makes it gRPC's default
// (experimental.SetDefaultBufferPool), which the protobuf codec also takes
// its marshalling buffers from: a pull's answer of a few hundred KiB
// cleared 1 MiB, and so did the SDK's every batch in `raftmq bench`.
func BufferPool() mem.BufferPool {
	return mem.NewTieredBufferPool(bufferTiers()...)
}

// bufferTiers are the pool's buffer sizes: gRPC's default tiers (256 B,
// 4, 16 and 32 KiB, 1 MiB) and every power of two from 64 KiB to 8 MiB.
func bufferTiers() []int {
	tiers := []int{256, 4 << 10, 16 << 10}
	for size := 32 << 10; size <= 8<<20; size *= 2 {
		tiers = append(tiers, size)
	}
	return tiers
}

// The gRPC server's flow-control windows are static, a stream's
// Config.StreamWindow and a connection's ConnWindow (broker.go's
// grpc.NewServer), each from minFlowWindow, HTTP/2's initial window, which
// gRPC takes as its least (it ignores a smaller one), to maxFlowWindow,
// well inside HTTP/2's 2^31-1. gRPC's dynamic windows (its default)
// estimate the link's bandwidth-delay product with a ping after the first
// message that follows each ping's answer: under synchronous sends, after
// nearly every message, on both sides, each ping a write and a wake-up for
// the peer, and its answer another. With the windows static on the broker
// and in the SDK (client/routes.go), 16 synchronous senders got 1.096x the
// messages a second (ahead in 10 pairs of 12) at 0.893x the CPU a message
// of the four processes (12 of 12), and a lone sender's p50 was 0.902x (10
// of 12; broker/README.md, 2026-12-07; three pairs on 2026-12-05, before
// send streams, had shown nothing through that day's noise).
const (
	minFlowWindow = 64 << 10
	maxFlowWindow = 1 << 30
)
