package cluster

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
)

func TestBoundErrorCutsLongMessagesKeepingCodeAndReason(t *testing.T) {
	long := "property " + strings.Repeat("é", 3<<20) + " too long"
	err := BoundError(pb.StatusError(codes.InvalidArgument, pb.ErrorReason_ILLEGAL_ARGUMENT, long, map[string]string{"k": "v"}))
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument || len(st.Message()) > MaxErrorMessage || !utf8.ValidString(st.Message()) {
		t.Fatalf("code %v, %d bytes, valid UTF-8 %v", st.Code(), len(st.Message()), utf8.ValidString(st.Message()))
	}
	if reason, meta := pb.ReasonOf(err); reason != pb.ErrorReason_ILLEGAL_ARGUMENT || meta["k"] != "v" {
		t.Fatalf("reason %v, metadata %v", reason, meta)
	}
	if !strings.HasPrefix(st.Message(), "property éé") {
		t.Fatalf("message %.40q", st.Message())
	}
	// Short ones and plain errors pass as they are (a plain one stays
	// Unknown, as gRPC would send it).
	short := pb.StatusError(codes.NotFound, pb.ErrorReason_TOPIC_NOT_FOUND, "no topic", nil)
	if BoundError(short) != short {
		t.Fatal("a short status changed")
	}
	if st, _ := status.FromError(BoundError(errors.New(long))); st.Code() != codes.Unknown || len(st.Message()) > MaxErrorMessage {
		t.Fatalf("a long plain error: %v, %d bytes", st.Code(), len(st.Message()))
	}
}
