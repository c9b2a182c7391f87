package remoting

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// A frame on the wire (RocketMQ remoting, as the official clients send it):
//
//	int32 BE  length of what follows (4 + header + body)
//	int32 BE  byte 0: the header's encoding (0 JSON, 1 ROCKETMQ); bytes 1-3: header length
//	header
//	body
//
// Requests come with a JSON header from the Go client and either from Java
// clients; answers go out with JSON headers, which every client reads.

// Header encodings.
const (
	encodingJSON     = 0
	encodingRocketMQ = 1
)

// FlagResponse marks an answer; a frame without it is a request.
// FlagOneway marks a request the client wants no answer to (RocketMQ's
// RPC_ONEWAY: END_TRANSACTION is sent so).
const (
	FlagResponse = 1
	FlagOneway   = 2
)

// DefaultMaxFrame caps a frame's length when the server's is not set: far
// above a batch of RocketMQ's default 4 MiB messages' worth, far below
// what one connection may make a node allocate.
const DefaultMaxFrame = 16 << 20

// ErrMalformed: bytes that are not a remoting frame. The server closes
// the connection that sent them.
var ErrMalformed = errors.New("remoting: malformed frame")

// Command is one request or answer.
type Command struct {
	Code      int32             `json:"code"`
	Language  string            `json:"language"`
	Version   int32             `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int32             `json:"flag"`
	Remark    string            `json:"remark"`
	ExtFields map[string]string `json:"extFields"`
	Body      []byte            `json:"-"`
}

// IsResponse reports whether c is an answer.
func (c *Command) IsResponse() bool { return c.Flag&FlagResponse != 0 }

// ReadCommand reads one frame from r, refusing frames longer than
// maxFrame before allocating them.
func ReadCommand(r io.Reader, maxFrame int) (*Command, error) {
	var lenBuf [4]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(lenBuf[:])
	if n < 4 || n > uint32(maxFrame) {
		return nil, fmt.Errorf("%w: a frame of %d bytes (limit %d)", ErrMalformed, n, maxFrame)
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(r, frame); err != nil {
		return nil, err
	}
	return DecodeFrame(frame)
}

// DecodeFrame decodes a frame without its leading length.
func DecodeFrame(frame []byte) (*Command, error) {
	if len(frame) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, no header length", ErrMalformed, len(frame))
	}
	tag := binary.BigEndian.Uint32(frame)
	encoding, headerLen := byte(tag>>24), int(tag&0xFFFFFF)
	if headerLen > len(frame)-4 {
		return nil, fmt.Errorf("%w: a header of %d bytes in a frame of %d", ErrMalformed, headerLen, len(frame))
	}
	header, body := frame[4:4+headerLen], frame[4+headerLen:]
	var c *Command
	var err error
	switch encoding {
	case encodingJSON:
		c, err = decodeJSONHeader(header)
	case encodingRocketMQ:
		c, err = decodeRocketMQHeader(header)
	default:
		return nil, fmt.Errorf("%w: header encoding %d", ErrMalformed, encoding)
	}
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		c.Body = body
	}
	return c, nil
}

func decodeJSONHeader(b []byte) (*Command, error) {
	c := &Command{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("%w: JSON header: %v", ErrMalformed, err)
	}
	return c, nil
}

// decodeRocketMQHeader reads RocketMQ's binary header:
//
//	int16 code | u8 language | int16 version | int32 opaque | int32 flag |
//	int32 remark length | remark | int32 fields length | fields
//
// fields being int16 key length | key | int32 value length | value, repeated.
func decodeRocketMQHeader(b []byte) (*Command, error) {
	d := decoder{b: b}
	c := &Command{Code: int32(int16(d.u16())), Language: languageName(d.u8()), Version: int32(int16(d.u16())),
		Opaque: int32(d.u32()), Flag: int32(d.u32())}
	remark := d.bytes(int(d.u32()))
	c.Remark = string(remark)
	fields := decoder{b: d.bytes(int(d.u32()))}
	if !utf8.Valid(remark) {
		d.err = ErrMalformed // headers are text (Java strings), answered as JSON
	}
	for d.err == nil && fields.err == nil && len(fields.b) > 0 {
		k := fields.bytes(int(fields.u16()))
		v := fields.bytes(int(fields.u32()))
		if !utf8.Valid(k) || !utf8.Valid(v) {
			fields.err = ErrMalformed
		}
		if fields.err == nil {
			if c.ExtFields == nil {
				c.ExtFields = map[string]string{}
			}
			c.ExtFields[string(k)] = string(v)
		}
	}
	if d.err != nil || fields.err != nil {
		return nil, fmt.Errorf("%w: binary header", ErrMalformed)
	}
	return c, nil
}

func languageName(b byte) string {
	names := []string{"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS"}
	if int(b) < len(names) {
		return names[b]
	}
	return "OTHER"
}

// decoder reads big-endian fields; the first short read sets err and
// every read after it yields zeros.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || n < 0 || n > len(d.b) {
		d.err = ErrMalformed
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u8() byte {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if b := d.take(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) bytes(n int) []byte { return d.take(n) }

// Encode appends c's frame, length first, with a JSON header.
func (c *Command) Encode(dst []byte) ([]byte, error) {
	header, err := json.Marshal(c)
	if err != nil {
		return dst, fmt.Errorf("remoting: %w", err)
	}
	if len(header) > 0xFFFFFF {
		return dst, fmt.Errorf("remoting: a header of %d bytes", len(header))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+len(header)+len(c.Body)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(encodingJSON)<<24|uint32(len(header)))
	dst = append(dst, header...)
	return append(dst, c.Body...), nil
}
