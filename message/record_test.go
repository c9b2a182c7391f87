package message

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to Decode. It must never
// panic; it must agree with Check; and a record it accepts must be
// re-encoded by AppendSized into exactly the bytes it came from when the
// encoding is canonical (property names strictly ascending, as AppendSized
// writes them), and into an equivalent record otherwise.
//
// Each input is tried twice: as given, and with the magic set and the CRC
// recomputed over the size its header claims, so that the fuzzer reaches
// the field decoder instead of stopping at the CRC.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		fzCheckDecode(t, data)
		if len(data) >= 12 {
			fixed := bytes.Clone(data)
			binary.BigEndian.PutUint32(fixed[4:], Magic)
			fzFixCRC(fixed)
			fzCheckDecode(t, fixed)
		}
	})
}

// fzFixCRC recomputes the CRC of the record at the start of b when its
// size field lies within b.
func fzFixCRC(b []byte) {
	if len(b) < 12 {
		return
	}
	size := int64(binary.BigEndian.Uint32(b))
	if size < 12 || size > int64(len(b)) {
		return
	}
	binary.BigEndian.PutUint32(b[8:], crc32.Checksum(b[12:size], castagnoli))
}

func fzCheckDecode(t *testing.T, data []byte) {
	t.Helper()
	r, err := Decode(data)
	n, cerr := Check(data)
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("Decode error does not wrap ErrMalformed: %v", err)
		}
		if cerr != nil && !errors.Is(cerr, ErrMalformed) {
			t.Fatalf("Check error does not wrap ErrMalformed: %v", cerr)
		}
		return
	}
	if cerr != nil {
		t.Fatalf("Decode accepted a record that Check rejects: %v", cerr)
	}
	if int(r.Size) != n || n < MinSize || n > len(data) {
		t.Fatalf("decoded size %d, Check size %d, input %d bytes", r.Size, n, len(data))
	}
	raw := data[:n]
	m := Message{
		Topic: r.Topic, QueueID: r.QueueID, Flag: r.Flag, Tags: r.Tags, Keys: r.Keys,
		Properties: r.Properties, Body: r.Body, BornTime: r.BornTime, StoreTime: r.StoreTime,
	}
	size, err := Size(&m)
	if err != nil {
		t.Fatalf("encodedSize of a decoded record: %v", err)
	}
	enc := AppendSized(nil, &m, size)
	Fill(enc, r.RaftIndex, r.Offset, r.QueueOffset, r.SysFlag)
	if fzCanonicalProperties(raw) {
		if !bytes.Equal(enc, raw) {
			t.Fatalf("re-encoding differs from the decoded bytes\n got %x\nwant %x", enc, raw)
		}
		return
	}
	// Property names repeated or out of order: Decode keeps the last
	// value of a name and AppendSized sorts, so only the meaning survives.
	r2, err := Decode(enc)
	if err != nil {
		t.Fatalf("re-encoded record does not decode: %v", err)
	}
	r2.Size = r.Size
	if !reflect.DeepEqual(r, r2) {
		t.Fatalf("re-encoded record decodes differently\n got %+v\nwant %+v", r2, r)
	}
}

// fzCanonicalProperties reports whether the property names of a record that
// Decode accepted are strictly ascending, as AppendSized writes them.
func fzCanonicalProperties(b []byte) bool {
	be := binary.BigEndian
	p := HeaderLen
	p += 1 + int(b[p])
	p += 2 + int(be.Uint16(b[p:]))
	keys := int(be.Uint16(b[p:]))
	p += 2
	for i := 0; i < keys; i++ {
		p += 2 + int(be.Uint16(b[p:]))
	}
	props := int(be.Uint16(b[p:]))
	p += 2
	var prev []byte
	for i := 0; i < props; i++ {
		nl := int(be.Uint16(b[p:]))
		name := b[p+2 : p+2+nl]
		if i > 0 && bytes.Compare(prev, name) >= 0 {
			return false
		}
		prev = name
		p += 2 + nl
		p += 2 + int(be.Uint16(b[p:]))
	}
	return true
}

// SetStoreTime stamps every record and refuses sizes that do not fit.
func TestSetStoreTime(t *testing.T) {
	var records []byte
	for i := range 5 {
		var err error
		m := Message{Topic: "T", QueueID: int32(i), Body: []byte("body"), Properties: map[string]string{"a": "b"}}
		if records, err = Append(records, &m); err != nil {
			t.Fatal(err)
		}
	}
	if err := SetStoreTime(records, 1234); err != nil {
		t.Fatal(err)
	}
	for p := 0; p < len(records); p += int(binary.BigEndian.Uint32(records[p:])) {
		if got := HeaderStoreTime(records[p:]); got != 1234 {
			t.Fatalf("record at %d: store time %d", p, got)
		}
	}
	for name, bad := range map[string][]byte{
		"truncated": records[:len(records)-1],
		"short":     records[:MinSize-1],
		"size too small": func() []byte {
			b := bytes.Clone(records)
			binary.BigEndian.PutUint32(b, 3)
			return b
		}(),
	} {
		if err := SetStoreTime(bad, 1); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// SetQueueID moves every record to another queue and leaves each one
// checking, with nothing else changed.
func TestSetQueueID(t *testing.T) {
	var records []byte
	var want []Message
	for i := range 4 {
		m := Message{Topic: "T", QueueID: 0, Tags: "t", Keys: []string{"k"}, Body: bytes.Repeat([]byte{byte(i)}, 10+i),
			Properties: map[string]string{PropertyUniqKey: "u", "b": "c"}, BornTime: int64(i)}
		var err error
		if records, err = Append(records, &m); err != nil {
			t.Fatal(err)
		}
		m.QueueID = 7
		want = append(want, m)
	}
	if err := SetQueueID(records, 7); err != nil {
		t.Fatal(err)
	}
	var again []byte
	for i := range want {
		again, _ = Append(again, &want[i])
	}
	if !bytes.Equal(records, again) {
		t.Fatal("records moved to queue 7 differ from records encoded for it")
	}
	for p := 0; p < len(records); {
		n, err := Check(records[p:])
		if err != nil {
			t.Fatal(err)
		}
		p += n
	}
	if err := SetQueueID(records[:len(records)-1], 1); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated: %v, want ErrMalformed", err)
	}
}

// A unique key given as UniqKey encodes to the bytes of the same key among
// the properties, wherever its name sorts among theirs, and the caller's
// map is left as it was; given both ways, the message is refused.
func TestUniqKeyEncodesAsItsProperty(t *testing.T) {
	for _, props := range []map[string]string{
		nil,
		{"A": "1"},
		{"A": "1", "ZZZ": "2"},
		{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6", "g": "7", "h": "8", "i": "9"},
	} {
		withKey := map[string]string{PropertyUniqKey: "k-1"}
		for k, v := range props {
			withKey[k] = v
		}
		want, err := Append(nil, &Message{Topic: "t", Properties: withKey, Body: []byte("b")})
		if err != nil {
			t.Fatal(err)
		}
		n := len(props)
		got, err := Append(nil, &Message{Topic: "t", Properties: props, UniqKey: "k-1", Body: []byte("b")})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("with %d properties: UniqKey encoded as %x, the property as %x", n, got, want)
		}
		if len(props) != n {
			t.Fatalf("the caller's properties changed: %v", props)
		}
	}
	_, err := Append(nil, &Message{Topic: "t", Properties: map[string]string{PropertyUniqKey: "a"}, UniqKey: "b"})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("a key given twice: %v", err)
	}
}
