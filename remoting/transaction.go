package remoting

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Transactional messages over the remoting protocol, as RocketMQ's clients
// speak it (RequestCode, EndTransactionRequestHeader,
// CheckTransactionStateRequestHeader): a producer sends a half message
// (the property TRAN_MSG=true) with an ordinary send, ends it with a
// one-way END_TRANSACTION naming the half's commitlog offset, and is asked
// about a half left open with a CHECK_TRANSACTION_STATE pushed on its
// connection, which it answers with another END_TRANSACTION.
const (
	CodeEndTransaction        = 37
	CodeCheckTransactionState = 39
)

// commitOrRollback values of END_TRANSACTION (MessageSysFlag's
// transaction types).
const (
	TransactionNotType      = 0
	TransactionCommitType   = 8
	TransactionRollbackType = 12
)

// EndTransaction is an END_TRANSACTION request's header.
type EndTransaction struct {
	ProducerGroup    string
	CommitLogOffset  int64
	CommitOrRollback int
	FromCheck        bool
}

// ReadEndTransaction reads an END_TRANSACTION request's header.
func ReadEndTransaction(c *Command) (*EndTransaction, error) {
	f := c.ExtFields
	off, err := strconv.ParseInt(f["commitLogOffset"], 10, 64)
	if err != nil || off < 0 {
		return nil, fmt.Errorf("header field commitLogOffset %.20q is not an offset", f["commitLogOffset"])
	}
	kind, err := intField(f, "commitOrRollback")
	if err != nil {
		return nil, err
	}
	return &EndTransaction{ProducerGroup: f["producerGroup"], CommitLogOffset: off, CommitOrRollback: int(kind),
		FromCheck: f["fromTransactionCheck"] == "true"}, nil
}

// CheckTransactionState is the push that asks a producer about a half
// message: body is the half as a stored message (AppendStored) with its
// own topic and queue, key its UNIQ_KEY.
func CheckTransactionState(commitLogOffset, queueOffset int64, key, offsetMsgID string, body []byte) *Command {
	return &Command{Code: CodeCheckTransactionState, ExtFields: map[string]string{
		"tranStateTableOffset": strconv.FormatInt(queueOffset, 10),
		"commitLogOffset":      strconv.FormatInt(commitLogOffset, 10),
		"msgId":                key,
		"transactionId":        key,
		"offsetMsgId":          offsetMsgID,
	}, Body: body}
}

// OffsetMsgID is RocketMQ's offset message id of the record at commitlog
// offset off stored by host:port: 32 upper-case hex digits of the IPv4
// address, the port (4 bytes) and the offset (8 bytes). RocketMQ's clients
// decode it to name the half message they end.
func OffsetMsgID(host [4]byte, port int32, off int64) string {
	var b [16]byte
	copy(b[:4], host[:])
	binary.BigEndian.PutUint32(b[4:], uint32(port))
	binary.BigEndian.PutUint64(b[8:], uint64(off))
	return strings.ToUpper(hex.EncodeToString(b[:]))
}
