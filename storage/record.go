package storage

import (
	"fmt"

	"github.com/raftmq/raftmq/message"
)

// Records are in package message's layout (message/record.go), which
// producers, the broker and the store share. What follows is how the store
// reads them: whatever fails to frame or check on disk is ErrCorrupt.

// checkRecord verifies the framing and CRC of the stored record at the
// start of b, and returns its size.
func checkRecord(b []byte) (int, error) {
	size, err := message.Check(b)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return size, nil
}

// decodeRecord decodes the stored record at the start of b; a record that
// does not check is ErrCorrupt.
func decodeRecord(b []byte) (message.Record, error) {
	r, err := message.Decode(b)
	if err != nil {
		return r, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return r, nil
}
