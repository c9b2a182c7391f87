package broker

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/storage"
)

// ErrorDomain is the domain of every ErrorInfo detail raftmq sends.
const ErrorDomain = "raftmq"

// statusError is a gRPC status with an ErrorInfo naming a pb.ErrorReason
// and, for some reasons, metadata (a NOT_LEADER error's "leader").
func statusError(code codes.Code, reason pb.ErrorReason, msg string, meta map[string]string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason.String(), Domain: ErrorDomain, Metadata: meta}); err == nil {
		st = d
	}
	return st.Err()
}

func invalid(reason pb.ErrorReason, msg string) error {
	return statusError(codes.InvalidArgument, reason, msg, nil)
}

// ReasonOf returns the ErrorReason and metadata of an error from a broker,
// or ERROR_REASON_UNSPECIFIED when it carries none.
func ReasonOf(err error) (pb.ErrorReason, map[string]string) {
	st, ok := status.FromError(err)
	if !ok {
		return pb.ErrorReason_ERROR_REASON_UNSPECIFIED, nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			return pb.ErrorReason(pb.ErrorReason_value[info.Reason]), info.Metadata
		}
	}
	return pb.ErrorReason_ERROR_REASON_UNSPECIFIED, nil
}

// storeError maps a storage error to a status.
func storeError(err error) error {
	switch {
	case errors.Is(err, storage.ErrMessageTooLarge):
		return invalid(pb.ErrorReason_MESSAGE_TOO_LARGE, err.Error())
	case errors.Is(err, storage.ErrInvalidMessage):
		return invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, err.Error())
	case errors.Is(err, storage.ErrOffsetRemoved), errors.Is(err, storage.ErrOffsetNotFound):
		return statusError(codes.NotFound, pb.ErrorReason_MESSAGE_NOT_FOUND, err.Error(), nil)
	default:
		return statusError(codes.Internal, pb.ErrorReason_STORE_ERROR, err.Error(), nil)
	}
}
