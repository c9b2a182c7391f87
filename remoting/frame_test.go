package remoting

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// A JSON-headed frame as the Go client writes one decodes; what Encode
// writes decodes to the same command.
func TestFramesRoundTrip(t *testing.T) {
	header := []byte(`{"code":105,"language":"GO","version":317,"opaque":7,"flag":0,"remark":"","extFields":{"topic":"orders"},"serializeTypeCurrentRPC":"JSON"}`)
	var frame []byte
	frame = binary.BigEndian.AppendUint32(frame, uint32(4+len(header)+3))
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(header)))
	frame = append(append(frame, header...), "abc"...)
	c, err := ReadCommand(bytes.NewReader(frame), DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	if c.Code != 105 || c.Opaque != 7 || c.ExtFields["topic"] != "orders" || string(c.Body) != "abc" || c.IsResponse() {
		t.Fatalf("%+v", c)
	}
	out, err := (&Command{Code: 17, Opaque: 7, Flag: FlagResponse, Remark: "no", ExtFields: map[string]string{"a": "b"}, Body: []byte("xyz")}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadCommand(bytes.NewReader(out), DefaultMaxFrame)
	if err != nil || back.Code != 17 || back.Opaque != 7 || !back.IsResponse() || back.Remark != "no" || back.ExtFields["a"] != "b" || string(back.Body) != "xyz" {
		t.Fatalf("%+v %v", back, err)
	}
}

// RocketMQ's binary header (Java clients may send it) decodes.
func TestRocketMQHeaderDecodes(t *testing.T) {
	var h []byte
	h = binary.BigEndian.AppendUint16(h, 34)
	h = append(h, 0) // JAVA
	h = binary.BigEndian.AppendUint16(h, 401)
	h = binary.BigEndian.AppendUint32(h, 9)
	h = binary.BigEndian.AppendUint32(h, 0)
	h = binary.BigEndian.AppendUint32(h, 2)
	h = append(h, "hi"...)
	var ext []byte
	ext = binary.BigEndian.AppendUint16(ext, 5)
	ext = append(ext, "group"...)
	ext = binary.BigEndian.AppendUint32(ext, 2)
	ext = append(ext, "cg"...)
	h = binary.BigEndian.AppendUint32(h, uint32(len(ext)))
	h = append(h, ext...)
	frame := binary.BigEndian.AppendUint32(nil, uint32(encodingRocketMQ)<<24|uint32(len(h)))
	frame = append(frame, h...)
	c, err := DecodeFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if c.Code != 34 || c.Language != "JAVA" || c.Version != 401 || c.Opaque != 9 || c.Remark != "hi" || c.ExtFields["group"] != "cg" {
		t.Fatalf("%+v", c)
	}
}

// Bad frames are ErrMalformed, never a panic or an allocation of what a
// length claims: over the cap, a header longer than the frame, an unknown
// encoding, a JSON field that is not a string, a truncated binary header.
func TestMalformedFramesAreRefused(t *testing.T) {
	for name, frame := range map[string][]byte{
		"over the cap":        binary.BigEndian.AppendUint32(nil, DefaultMaxFrame+1),
		"too short":           binary.BigEndian.AppendUint32(nil, 2),
		"header past the end": append(binary.BigEndian.AppendUint32(nil, 8), 0, 0, 0, 9, 1, 2, 3, 4),
		"unknown encoding":    append(binary.BigEndian.AppendUint32(nil, 6), 7, 0, 0, 2, '{', '}'),
		"a number in extFields": func() []byte {
			h := []byte(`{"code":1,"extFields":{"queueId":3}}`)
			return append(append(binary.BigEndian.AppendUint32(nil, uint32(4+len(h))), 0, 0, 0, byte(len(h))), h...)
		}(),
		"truncated binary header": append(binary.BigEndian.AppendUint32(nil, 7), 1, 0, 0, 3, 0, 1, 0),
	} {
		if _, err := ReadCommand(bytes.NewReader(frame), DefaultMaxFrame); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// FuzzDecodeFrame: any bytes decode or are ErrMalformed, and whatever
// decodes encodes and decodes again to the same fields.
func FuzzDecodeFrame(f *testing.F) {
	h := []byte(`{"code":105,"opaque":1,"extFields":{"topic":"t"}}`)
	f.Add(append(append(binary.BigEndian.AppendUint32(nil, uint32(len(h))), h...), "body"...))
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, frame []byte) {
		c, err := DecodeFrame(frame)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		out, err := c.Encode(nil)
		if err != nil {
			return // a header too long to re-encode as JSON
		}
		back, err := ReadCommand(bytes.NewReader(out), len(out))
		if err != nil || back.Code != c.Code || back.Opaque != c.Opaque || back.Flag != c.Flag || !bytes.Equal(back.Body, c.Body) || len(back.ExtFields) != len(c.ExtFields) {
			t.Fatalf("re-encoded %+v came back %+v (%v)", c, back, err)
		}
	})
}
