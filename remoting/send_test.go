package remoting

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func TestSendRequestsBecomeNativeSends(t *testing.T) {
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write([]byte(strings.Repeat("a", 5000)))
	w.Close()
	props := "TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1\x02color\x01blue\x02"
	c := &Command{Code: CodeSendMessageV2, Body: z.Bytes(), ExtFields: map[string]string{"b": "orders", "e": "3", "f": "1", "g": "1700000000000", "h": "0", "i": props}}
	req, err := SendRequest(c, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	m := req.Messages[0]
	if req.Topic != "orders" || req.QueueId != 3 || len(m.Body) != 5000 || m.Tags != "TagA" || strings.Join(m.Keys, ",") != "k1,k2" ||
		m.Properties["UNIQ_KEY"] != "U1" || m.Properties["color"] != "blue" || m.Properties["TAGS"] != "" || m.BornTimestamp != 1700000000000 {
		t.Fatalf("%+v %+v", req, m)
	}
	if _, err := SendRequest(c, 4096); err == nil || !strings.Contains(err.Error(), "inflating past 4096") {
		t.Fatalf("a body inflating past the limit: %v", err)
	}
	if _, err := SendRequest(&Command{Code: CodeSendMessage, ExtFields: map[string]string{"topic": "t", "queueId": "x"}}, 1<<20); err == nil {
		t.Fatal("a queue id that is not a number taken")
	}
}

func TestBatchBodiesDecodeOrAreRefused(t *testing.T) {
	rec := func(body, props string) []byte {
		total := 20 + len(body) + 2 + len(props)
		b := binary.BigEndian.AppendUint32(nil, uint32(total))
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint32(b, 7) // flag
		b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(props)))
		return append(b, props...)
	}
	body := append(rec("one", "KEYS\x01a\x02"), rec("two", "")...)
	req, err := SendRequest(&Command{Code: CodeSendBatchMessage, Body: body, ExtFields: map[string]string{"b": "t", "e": "0"}}, 1<<20)
	if err != nil || len(req.Messages) != 2 || string(req.Messages[0].Body) != "one" || req.Messages[0].Keys[0] != "a" || req.Messages[1].Flag != 7 {
		t.Fatalf("%+v %v", req, err)
	}
	for name, bad := range map[string][]byte{
		"truncated":      body[:len(body)-1],
		"a length past":  append(binary.BigEndian.AppendUint32(nil, 1000), make([]byte, 30)...),
		"body past":      func() []byte { b := rec("x", ""); binary.BigEndian.PutUint32(b[16:], 99); return b }(),
		"a short record": make([]byte, 10),
	} {
		if _, err := SendRequest(&Command{Code: CodeSendBatchMessage, Body: bad, ExtFields: map[string]string{"b": "t", "e": "0"}}, 1<<20); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// FuzzSendRequest: a producer's send (code 10, 310 or 320) with any header
// fields and body becomes a native send or an error, never a panic; an
// accepted one carries the header's topic, and a zlib body inflated to at
// most the limit, not to what it claims (a body as sent is the native
// send's to check against the limit).
func FuzzSendRequest(f *testing.F) {
	var zbody bytes.Buffer
	zw := zlib.NewWriter(&zbody)
	zw.Write(bytes.Repeat([]byte("0123456789"), 100))
	zw.Close()
	f.Add(uint8(0), "0", "0", "TAGS\x01a\x02KEYS\x01k1 k2\x02", []byte("body"))
	f.Add(uint8(1), "3", "1", "", zbody.Bytes())
	f.Add(uint8(2), "0", "0", "", append(binary.BigEndian.AppendUint32(nil, 27), append(make([]byte, 12), 0, 0, 0, 5, 'b', 'a', 't', 'c', 'h', 0, 0)...))
	codes := []int32{CodeSendMessage, CodeSendMessageV2, CodeSendBatchMessage}
	const limit = 4 << 10
	f.Fuzz(func(t *testing.T, code uint8, queue, sysFlag, props string, body []byte) {
		c := &Command{Code: codes[int(code)%len(codes)], Body: body,
			ExtFields: map[string]string{"topic": "t", "b": "t", "queueId": queue, "e": queue, "sysFlag": sysFlag, "h": sysFlag, "properties": props, "i": props}}
		req, err := SendRequest(c, limit)
		if err != nil {
			return
		}
		if req.Topic != "t" {
			t.Fatalf("topic %q, want the header's", req.Topic)
		}
		for _, m := range req.Messages {
			// A body as sent is the native send's to check; one inflated
			// here stops at the limit.
			if len(m.Body) > max(limit, len(body)) {
				t.Fatalf("a body of %d bytes from %d sent, past the limit %d", len(m.Body), len(body), limit)
			}
		}
	})
}
