package cluster

import (
	"context"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// MaxErrorMessage bounds the message of a status a server sends: bad input
// is echoed at most as a short prefix. (An oversized property name once
// came back whole in its error, a 3 MB status.)
const MaxErrorMessage = 512

// BoundErrors is a unary server interceptor that cuts the message of a
// returned status to MaxErrorMessage bytes, keeping its code and details.
func BoundErrors(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, BoundError(err)
}

// BoundStreamErrors is BoundErrors for streams.
func BoundStreamErrors(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return BoundError(handler(srv, ss))
}

// BoundError is err with its status message cut by BoundMessage: what
// BoundErrors does to an RPC's error, for an answer that carries a status
// inside a message (a send stream's).
func BoundError(err error) error {
	if err == nil {
		return nil
	}
	st, _ := status.FromError(err) // a non-status error is Unknown with its text
	if len(st.Message()) <= MaxErrorMessage {
		return err
	}
	p := st.Proto()
	p.Message = BoundMessage(st.Message())
	return status.FromProto(p).Err()
}

// BoundMessage is msg cut to at most MaxErrorMessage bytes, on a rune
// boundary, saying how much was cut: what every answer to a client
// carries of an error (gRPC statuses here, RocketMQ remarks in the
// broker's remoting gateway).
func BoundMessage(msg string) string {
	if len(msg) <= MaxErrorMessage {
		return msg
	}
	cut := MaxErrorMessage - 40
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes cut)", msg[:cut], len(msg)-cut)
}
