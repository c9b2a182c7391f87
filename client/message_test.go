package client

import (
	"bytes"
	"testing"

	"github.com/raftmq/raftmq/message"
)

// TestASendsRecordsAreEncodedIntoOneBufferOfTheirSize: a batch's records
// are the messages in order, each with its own unique key (the one it
// carries, else a new one), in a buffer allocated once at their exact size:
// growing it message by message was a quarter of the batched bench client's
// CPU (growslice, and the scavenger returning the discarded buffers).
func TestASendsRecordsAreEncodedIntoOneBufferOfTheirSize(t *testing.T) {
	msgs := []*Message{
		{Topic: "t", Tags: "a", Keys: []string{"k1", "k2"}, Body: bytes.Repeat([]byte("x"), 1000)},
		{Topic: "t", Properties: map[string]string{message.PropertyUniqKey: "mine", "p": "v"}, Body: []byte("second")},
		{Topic: "t", Flag: 7, Body: nil},
		{Topic: "t", Properties: map[string]string{"p": "v"}, Body: []byte("fourth")},
		{Topic: "t", Properties: map[string]string{message.PropertyUniqKey: ""}, Body: []byte("fifth")},
	}
	records, keys, err := encodeRecords(msgs)
	if err != nil {
		t.Fatal(err)
	}
	if cap(records) != len(records) {
		t.Errorf("records: len %d, cap %d: the buffer was not sized once", len(records), cap(records))
	}
	if keys[1] != "mine" || keys[0] == "" || keys[2] == "" || keys[0] == keys[2] || keys[3] == "" || keys[4] == "" {
		t.Errorf("unique keys %q: want a new one each but the second's own", keys)
	}
	// The key is written beside the caller's properties, never into them.
	if len(msgs[3].Properties) != 1 || msgs[4].Properties[message.PropertyUniqKey] != "" {
		t.Errorf("the callers' properties changed: %v, %v", msgs[3].Properties, msgs[4].Properties)
	}
	for i, b := 0, records; i < len(msgs); i++ {
		r, err := message.Decode(b)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		m := msgs[i]
		if r.Topic != m.Topic || r.Tags != m.Tags || r.Flag != m.Flag || !bytes.Equal(r.Body, m.Body) ||
			len(r.Keys) != len(m.Keys) || r.Properties[message.PropertyUniqKey] != keys[i] || r.QueueID != 0 || r.BornTime == 0 {
			t.Errorf("record %d decodes as %+v, sent %+v with key %q", i, r, m, keys[i])
		}
		if (i == 1 || i == 3) && r.Properties["p"] != "v" {
			t.Errorf("record %d lost its property: %v", i, r.Properties)
		}
		b = b[r.Size:]
		if i == len(msgs)-1 && len(b) != 0 {
			t.Errorf("%d bytes after the last record", len(b))
		}
	}
	if _, _, err := encodeRecords([]*Message{{Topic: "t", Tags: string(make([]byte, 70000))}}); err == nil {
		t.Error("tags too long for a record: no error")
	}
}

// TestADecodedMessagesBodyIsItsRecordsBytes: a pulled message's body is
// its record's bytes, not a copy (see decodeMessage), and appending to it
// leaves the record as it was.
func TestADecodedMessagesBodyIsItsRecordsBytes(t *testing.T) {
	raw, err := message.Append(nil, &message.Message{Topic: "t", Body: []byte("body"),
		Properties: map[string]string{"p": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeMessage(raw, "g")
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Body) != "body" || m.MsgID != "g@0000000000000000" {
		t.Fatalf("decoded body %q, id %q", m.Body, m.MsgID)
	}
	if &m.Body[0] != &raw[len(raw)-len(m.Body)] {
		t.Error("the body is a copy of the record's bytes")
	}
	before := bytes.Clone(raw)
	m.Body = append(m.Body, "more"...)
	if !bytes.Equal(raw, before) {
		t.Error("appending to the body wrote into the record")
	}
}
