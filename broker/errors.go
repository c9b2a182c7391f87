package broker

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/storage"
)

var (
	statusError = pb.StatusError
	// ReasonOf returns the ErrorReason and metadata of an error from a
	// broker (see pb.ReasonOf).
	ReasonOf = pb.ReasonOf
)

func invalid(reason pb.ErrorReason, msg string) error {
	return statusError(codes.InvalidArgument, reason, msg, nil)
}

// storeError maps a storage error to a status.
func storeError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err // a status already (errWritesPaused)
	}
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

// errStaleMove answers a schedule move whose cursors another move has
// passed: its messages were moved by that one.
var errStaleMove = errors.New("broker: schedule move read from cursors already passed; not applied")
