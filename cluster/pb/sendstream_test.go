package pb

import (
	"slices"
	"testing"
)

// A request's sends and a response's answers are its own and those
// batched in it, at any depth, in order; nil ones are left out.
func TestSendsAndAnswersAreFlattenedInOrder(t *testing.T) {
	req := &SendStreamRequest{Id: 1, More: []*SendStreamRequest{
		{Id: 2, More: []*SendStreamRequest{{Id: 3}}},
		nil,
		{Id: 4},
	}}
	var ids []uint64
	for _, r := range req.Sends() {
		ids = append(ids, r.Id)
	}
	if want := []uint64{1, 2, 3, 4}; !slices.Equal(ids, want) {
		t.Fatalf("sends %v, want %v", ids, want)
	}
	if got := (&SendStreamRequest{Id: 9}).Sends(); len(got) != 1 || got[0].Id != 9 {
		t.Fatalf("a lone send: %v", got)
	}
	resp := &SendStreamResponse{Id: 5, More: []*SendStreamResponse{{Id: 6}, {Id: 7, More: []*SendStreamResponse{{Id: 8}}}}}
	ids = ids[:0]
	for _, r := range resp.Answers() {
		ids = append(ids, r.Id)
	}
	if want := []uint64{5, 6, 7, 8}; !slices.Equal(ids, want) {
		t.Fatalf("answers %v, want %v", ids, want)
	}
}
