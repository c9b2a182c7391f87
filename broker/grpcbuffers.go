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
