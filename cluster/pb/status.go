package pb

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
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

// SendStreamAnswer is the answer to the send with id on a
// SendMessageStream: resp, or, when err is not nil, err's gRPC status
// serialized (a non-status error is Unknown with its text).
func SendStreamAnswer(id uint64, resp *SendMessageResponse, err error) *SendStreamResponse {
	if err == nil {
		return &SendStreamResponse{Id: id, Result: resp}
	}
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil { // a google.rpc.Status always encodes; say so if not
		b, _ = proto.Marshal(status.New(codes.Internal, "the answer's status does not encode: "+merr.Error()).Proto())
	}
	return &SendStreamResponse{Id: id, Status: b}
}

// Err is the status a send stream's answer carries, as an error; nil for
// a result. An answer with neither, or whose status does not decode or is
// OK, is an Internal error.
func (r *SendStreamResponse) Err() error {
	if len(r.Status) == 0 {
		if r.Result == nil {
			return status.Error(codes.Internal, "a send stream's answer has neither a result nor a status")
		}
		return nil
	}
	var p spb.Status
	if err := proto.Unmarshal(r.Status, &p); err != nil {
		return status.Errorf(codes.Internal, "a send stream's answer's status does not decode: %v", err)
	}
	if p.Code == int32(codes.OK) {
		return status.Error(codes.Internal, "a send stream's answer has an OK status and no result")
	}
	return status.FromProto(&p).Err()
}
