package clustertest

import (
	"testing"

	"github.com/raftmq/raftmq/message"
)

// Records is one record of topic on queue 0 for each body, back to back,
// in the layout of package message, as a producer sends them.
func Records(t testing.TB, topic string, bodies ...string) []byte {
	t.Helper()
	var out []byte
	for _, b := range bodies {
		var err error
		if out, err = message.Append(out, &message.Message{Topic: topic, Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
