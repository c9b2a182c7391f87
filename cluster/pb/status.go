package pb

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the domain of every ErrorInfo detail raftmq sends.
const ErrorDomain = "raftmq"

// StatusError is a gRPC status with an ErrorInfo naming an ErrorReason
// and, for some reasons, metadata (a NOT_LEADER error's "leader"). It is
// part of the contract so that servers and the SDK agree on the detail
// without the SDK importing a server package.
func StatusError(code codes.Code, reason ErrorReason, msg string, meta map[string]string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason.String(), Domain: ErrorDomain, Metadata: meta}); err == nil {
		st = d
	}
	return st.Err()
}

// ReasonOf returns the ErrorReason and metadata of an error from a raftmq
// server, or ERROR_REASON_UNSPECIFIED when it carries none.
func ReasonOf(err error) (ErrorReason, map[string]string) {
	st, ok := status.FromError(err)
	if !ok {
		return ErrorReason_ERROR_REASON_UNSPECIFIED, nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			return ErrorReason(ErrorReason_value[info.Reason]), info.Metadata
		}
	}
	return ErrorReason_ERROR_REASON_UNSPECIFIED, nil
}
