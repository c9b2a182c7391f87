package pb

// The HTTP/2 flow-control windows of raftmq's gRPC connections are static
// on both ends: a broker's server grants them (broker.Config.StreamWindow
// and ConnWindow), and so does the SDK's every connection
// (client.WithFlowControlWindows). gRPC's dynamic windows, its default,
// estimate the link's bandwidth-delay product with a ping after the first
// message that follows each ping's answer: under synchronous sends, after
// nearly every message, on both sides, each ping a write and a wake-up for
// the peer, and its answer another. With the windows static on both ends,
// 16 synchronous senders got 1.096x the messages a second (ahead in 10
// pairs of 12) at 0.893x the CPU a message of the four processes (12 of
// 12), and a lone sender's p50 was 0.902x (10 of 12; broker/README.md,
// 2026-12-07; three pairs on 2026-12-05, before send streams, had shown
// nothing through that day's noise).
const (
	// StreamWindowDefault and ConnWindowDefault are the windows a stream
	// and a connection are granted unless configured otherwise.
	StreamWindowDefault = 1 << 20
	ConnWindowDefault   = 8 << 20
	// FlowWindowMin is HTTP/2's initial window, which gRPC takes as its
	// least (it ignores a smaller one); FlowWindowMax is well inside
	// HTTP/2's 2^31-1.
	FlowWindowMin = 64 << 10
	FlowWindowMax = 1 << 30
)

// ValidFlowWindow says whether n bytes is a window either end may grant.
func ValidFlowWindow(n int) bool { return n >= FlowWindowMin && n <= FlowWindowMax }
