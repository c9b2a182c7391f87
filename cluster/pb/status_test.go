package pb

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A send stream's answer carries a result, or a status that comes back
// whole (code, message, reason and its metadata); a malformed one is an
// Internal error, never a result.
func TestSendStreamAnswerCarriesResultOrStatus(t *testing.T) {
	ok := SendStreamAnswer(7, &SendMessageResponse{QueueId: 3}, nil)
	if err := ok.Err(); err != nil || ok.Id != 7 || ok.Result.QueueId != 3 {
		t.Fatalf("a result: %v, %v", ok, err)
	}
	sent := StatusError(codes.Unavailable, ErrorReason_NOT_LEADER, "not the master", map[string]string{"leader": "10.0.0.2:8080"})
	err := SendStreamAnswer(8, nil, sent).Err()
	reason, meta := ReasonOf(err)
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "not the master" || reason != ErrorReason_NOT_LEADER || meta["leader"] != "10.0.0.2:8080" {
		t.Fatalf("a status: %v (reason %v, %v)", err, reason, meta)
	}
	okStatus, _ := proto.Marshal(status.New(codes.OK, "fine").Proto()) // an OK status with nothing in it encodes to no bytes
	for name, a := range map[string]*SendStreamResponse{
		"neither":      {Id: 9},
		"garbage":      {Id: 9, Status: []byte{0xff, 0xff, 0xff}},
		"an OK status": {Id: 9, Status: okStatus, Result: &SendMessageResponse{}},
	} {
		if err := a.Err(); status.Code(err) != codes.Internal {
			t.Fatalf("%s: %v, want Internal", name, err)
		}
	}
}
