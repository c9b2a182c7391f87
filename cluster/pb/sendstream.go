package pb

// SendBatchesKey is the metadata key with which each side of a
// SendMessageStream says it reads batched messages (value "1"): a producer
// in its request metadata, for answers batched in SendStreamResponse.more;
// a broker in the stream's header, which it sends as the stream opens, for
// sends batched in SendStreamRequest.more. Either side sends batches only
// to a peer that said so: one older than batching would drop the batched
// sends or answers (an unknown field) and leave their senders waiting.
//
// A batch carries what queued while the previous message was being sent:
// under 16 synchronous senders each message on the stream cost the
// producer a socket write (0.88 writes a send, /proc/PID/io), about a
// quarter of its CPU (broker/README.md, 2026-12-04).
const SendBatchesKey = "raftmq-send-batches"

// Sends is the request's sends, its own and those batched in it (at any
// depth), in order.
func (r *SendStreamRequest) Sends() []*SendStreamRequest {
	return flatten(r, (*SendStreamRequest).GetMore)
}

// Answers is the response's answers, its own and those batched in it (at
// any depth), in order.
func (r *SendStreamResponse) Answers() []*SendStreamResponse {
	return flatten(r, (*SendStreamResponse).GetMore)
}

// flatten is root and what more holds under it, depth first, in order;
// nil entries left out.
func flatten[T comparable](root T, more func(T) []T) []T {
	if len(more(root)) == 0 {
		return []T{root}
	}
	var zero T
	var out []T
	stack := []T{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		out = append(out, n)
		m := more(n)
		for i := len(m) - 1; i >= 0; i-- {
			if m[i] != zero {
				stack = append(stack, m[i])
			}
		}
	}
	return out
}
