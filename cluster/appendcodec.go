package cluster

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/hashicorp/raft"
)

// The wire form of an AppendEntries and its answer on the member's own
// stream (appendstream.go), in place of hashicorp/raft's msgpack.
//
// go-msgpack reads each entry's data into a slice it grows in steps,
// copying what it has read at each step (decByteSlice: makeslice, readb,
// makeslicecopy; a step is at most its MaxInitLen), and encodes it
// through its own buffer into bufio's: under batched
// publish (entries of about 540 messages of 1 KiB) that was 19% of a
// follower's CPU and 18% of the master's (broker/README.md, seventeenth
// sitting). Here an entry's bytes are read from the socket straight into
// the one slice the entry keeps, and written from the entry's slice to
// the socket.
//
// A request is a head and then each entry's data and extensions, in
// order:
//
//	u32 head length (of what follows, up to the entries' bytes)
//	i64 protocol version, u16-length-prefixed ID, Addr, Leader
//	u64 term, previous entry, previous term, leader commit index
//	u32 entry count, then for each entry:
//	    u64 index, u64 term, u8 type, i64 appended-at (Unix ns;
//	    math.MinInt64 for the zero time), u32 data length, u32
//	    extensions length
//
// An answer is one piece:
//
//	u32 length, u16-length-prefixed error (empty for none),
//	i64 protocol version, u16-length-prefixed ID and Addr,
//	u64 term, u64 last log, u8 success, u8 no-retry-backoff
//
// All integers are little-endian. A length over what the reader allows
// (appendLimits) fails the read before anything is allocated for it, and
// an entry's slice is allocated only as its bytes are about to arrive, so
// a peer cannot make a member hold more than one entry's cap it did not
// send.

// appendLimits bound what a member reads from a peer's request.
type appendLimits struct {
	entryBytes int // one entry's data and extensions together (RaftConfig.MaxEntryBytes)
}

const (
	// maxAppendRequestEntries bounds a request's entry count: hashicorp/raft
	// refuses a MaxAppendEntries over 1024.
	maxAppendRequestEntries = 1024
	// maxWireField bounds an ID, an address or an error message.
	maxWireField   = math.MaxUint16
	entryHeadBytes = 8 + 8 + 1 + 8 + 4 + 4
	fixedHeadBytes = 8 + 3*2 + 4*8 + 4
	// maxAppendHead bounds a request's head.
	maxAppendHead = fixedHeadBytes + 3*maxWireField + maxAppendRequestEntries*entryHeadBytes
	// maxAppendAnswer bounds an answer.
	maxAppendAnswer = 2 + maxWireField + 8 + 2*(2+maxWireField) + 8 + 8 + 2
	zeroTimeNanos   = math.MinInt64
)

// errWire is a request or answer that does not parse.
var errWire = errors.New("cluster: malformed AppendEntries on the member stream")

// appendHead encodes req's head (everything but the entries' bytes) after
// buf[:0], length first.
func appendHead(buf []byte, req *raft.AppendEntriesRequest) ([]byte, error) {
	if len(req.Entries) > maxAppendRequestEntries {
		return nil, fmt.Errorf("cluster: an AppendEntries of %d entries, over %d", len(req.Entries), maxAppendRequestEntries)
	}
	b := binary.LittleEndian.AppendUint32(buf[:0], 0)
	b = binary.LittleEndian.AppendUint64(b, uint64(req.ProtocolVersion))
	var err error
	for _, f := range [][]byte{req.ID, req.Addr, req.Leader} {
		if b, err = appendField(b, f); err != nil {
			return nil, err
		}
	}
	for _, v := range []uint64{req.Term, req.PrevLogEntry, req.PrevLogTerm, req.LeaderCommitIndex} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(req.Entries)))
	for _, e := range req.Entries {
		if len(e.Data) > math.MaxUint32 || len(e.Extensions) > math.MaxUint32 {
			return nil, fmt.Errorf("cluster: entry %d of %d bytes, over the wire's limit", e.Index, len(e.Data)+len(e.Extensions))
		}
		b = binary.LittleEndian.AppendUint64(b, e.Index)
		b = binary.LittleEndian.AppendUint64(b, e.Term)
		b = append(b, byte(e.Type))
		at := int64(zeroTimeNanos)
		if !e.AppendedAt.IsZero() {
			at = e.AppendedAt.UnixNano()
		}
		b = binary.LittleEndian.AppendUint64(b, uint64(at))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e.Data)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e.Extensions)))
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b, nil
}

func appendField(b, f []byte) ([]byte, error) {
	if len(f) > maxWireField {
		return nil, fmt.Errorf("cluster: a field of %d bytes, over %d", len(f), maxWireField)
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(f)))
	return append(b, f...), nil
}

// writeAppendRequest writes req to w (not flushed). head is scratch space
// it may grow and returns.
func writeAppendRequest(w *bufio.Writer, req *raft.AppendEntriesRequest, head []byte) ([]byte, error) {
	head, err := appendHead(head, req)
	if err != nil {
		return head, err
	}
	if _, err := w.Write(head); err != nil {
		return head, err
	}
	for _, e := range req.Entries {
		// bufio writes a slice larger than its free space straight to the
		// connection once its own buffer is flushed: one copy at most of
		// an entry's first 64 KiB.
		if _, err := w.Write(e.Data); err != nil {
			return head, err
		}
		if _, err := w.Write(e.Extensions); err != nil {
			return head, err
		}
	}
	return head, nil
}

// readAppendRequest reads one request from r. head is scratch space it
// may grow and returns; the request keeps none of it.
func readAppendRequest(r *bufio.Reader, lim appendLimits, head []byte) (*raft.AppendEntriesRequest, []byte, error) {
	body, err := readPiece(r, maxAppendHead, head)
	if err != nil {
		return nil, body, err
	}
	d := wireReader{b: body}
	req := &raft.AppendEntriesRequest{}
	req.ProtocolVersion = raft.ProtocolVersion(int64(d.u64()))
	req.ID, req.Addr, req.Leader = d.field(), d.field(), d.field()
	req.Term, req.PrevLogEntry, req.PrevLogTerm, req.LeaderCommitIndex = d.u64(), d.u64(), d.u64(), d.u64()
	n := d.u32()
	if d.err != nil || n > maxAppendRequestEntries || int(n)*entryHeadBytes != len(d.b) {
		return nil, body, errWire
	}
	type sizes struct{ data, ext uint32 }
	entries := make([]raft.Log, n) // one allocation for the request's entries
	lens := make([]sizes, n)
	for i := range entries {
		e := &entries[i]
		e.Index, e.Term, e.Type = d.u64(), d.u64(), raft.LogType(d.u8())
		if at := int64(d.u64()); at != zeroTimeNanos {
			e.AppendedAt = time.Unix(0, at)
		}
		lens[i] = sizes{d.u32(), d.u32()}
		if uint64(lens[i].data)+uint64(lens[i].ext) > uint64(lim.entryBytes) {
			return nil, body, fmt.Errorf("%w: entry %d of %d bytes, over the member's MaxEntryBytes %d", errWire, e.Index, uint64(lens[i].data)+uint64(lens[i].ext), lim.entryBytes)
		}
	}
	req.Entries = make([]*raft.Log, n)
	for i := range entries {
		e := &entries[i]
		if e.Data, err = readBytes(r, lens[i].data); err != nil {
			return nil, body, err
		}
		if e.Extensions, err = readBytes(r, lens[i].ext); err != nil {
			return nil, body, err
		}
		req.Entries[i] = e
	}
	return req, body, nil
}

// readBytes reads n bytes into a slice of their own (nil for none).
// bufio hands a read larger than its buffer, once empty, straight to the
// connection, so most of an entry goes from the socket into its slice.
func readBytes(r *bufio.Reader, n uint32) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, unexpectedEOF(err)
	}
	return b, nil
}

// readPiece reads a u32 length and that many bytes (at most limit) into
// buf's space.
func readPiece(r *bufio.Reader, limit int, buf []byte) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return buf, err // io.EOF between requests is the peer closing
	}
	n := binary.LittleEndian.Uint32(l[:])
	if uint64(n) > uint64(limit) {
		return buf, fmt.Errorf("%w: a piece of %d bytes, over %d", errWire, n, limit)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf, unexpectedEOF(err)
	}
	return buf, nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// writeAppendAnswer writes an answer (resp, or the handler's error) to w
// (not flushed).
func writeAppendAnswer(w *bufio.Writer, resp *raft.AppendEntriesResponse, rpcErr error, buf []byte) ([]byte, error) {
	b := binary.LittleEndian.AppendUint32(buf[:0], 0)
	msg := ""
	if rpcErr != nil {
		msg = rpcErr.Error()
		if len(msg) > maxWireField {
			msg = msg[:maxWireField]
		}
	}
	if resp == nil {
		resp = &raft.AppendEntriesResponse{}
	}
	b, _ = appendField(b, []byte(msg))
	b = binary.LittleEndian.AppendUint64(b, uint64(resp.ProtocolVersion))
	var err error
	for _, f := range [][]byte{resp.ID, resp.Addr} {
		if b, err = appendField(b, f); err != nil {
			return b, err
		}
	}
	b = binary.LittleEndian.AppendUint64(b, resp.Term)
	b = binary.LittleEndian.AppendUint64(b, resp.LastLog)
	b = append(b, boolByte(resp.Success), boolByte(resp.NoRetryBackoff))
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	_, err = w.Write(b)
	return b, err
}

// readAppendAnswer reads an answer into resp; a well-formed answer that
// carries the handler's error returns it as errRemote.
func readAppendAnswer(r *bufio.Reader, resp *raft.AppendEntriesResponse, buf []byte) ([]byte, error) {
	body, err := readPiece(r, maxAppendAnswer, buf)
	if err != nil {
		return body, unexpectedEOF(err)
	}
	d := wireReader{b: body}
	msg := d.field()
	*resp = raft.AppendEntriesResponse{}
	resp.ProtocolVersion = raft.ProtocolVersion(int64(d.u64()))
	resp.ID, resp.Addr = d.field(), d.field()
	resp.Term, resp.LastLog = d.u64(), d.u64()
	resp.Success, resp.NoRetryBackoff = d.u8() == 1, d.u8() == 1
	if d.err != nil || len(d.b) != 0 {
		return body, errWire
	}
	if len(msg) > 0 {
		return body, errRemote{string(msg)}
	}
	return body, nil
}

// errRemote is the error a peer's Raft answered a request with.
type errRemote struct{ msg string }

func (e errRemote) Error() string { return e.msg }

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// wireReader takes little-endian fields off b; past its end it records
// errWire and yields zeros.
type wireReader struct {
	b   []byte
	err error
}

func (d *wireReader) take(n int) []byte {
	if d.err != nil || len(d.b) < n {
		d.err = errWire
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *wireReader) u8() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *wireReader) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *wireReader) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

// field is a u16-length-prefixed field, copied out (the head's buffer is
// reused); nil when empty.
func (d *wireReader) field() []byte {
	n := 0
	if v := d.take(2); v != nil {
		n = int(binary.LittleEndian.Uint16(v))
	}
	v := d.take(n)
	if len(v) == 0 {
		return nil
	}
	return append([]byte(nil), v...)
}
