package storage

import "errors"

// Errors returned by the store. Callers test them with errors.Is; the wrapped
// message says which field, offset or file is at fault.
var (
	// ErrInvalidMessage: the message cannot be stored (illegal topic name,
	// queue id out of range, field too long, record over the size limit).
	// Nothing of the batch it came in was written.
	ErrInvalidMessage = errors.New("invalid message")
	// ErrMessageTooLarge: a record over Config.MaxMessageSize. It wraps
	// ErrInvalidMessage too.
	ErrMessageTooLarge = errors.New("message too large")
	// ErrStaleRaftIndex: an append whose Raft index is not above the highest
	// one the store holds. The entry is already applied; skipping it is safe.
	ErrStaleRaftIndex = errors.New("raft index already applied")
	// ErrCorrupt: stored bytes fail their CRC or framing. Corrupt records are
	// reported, never returned as messages.
	ErrCorrupt = errors.New("corrupt data")
	// ErrOffsetRemoved: the commitlog offset lies in a segment deleted by
	// retention.
	ErrOffsetRemoved = errors.New("offset removed by retention")
	// ErrOffsetNotFound: no record starts at that commitlog offset.
	ErrOffsetNotFound = errors.New("no record at offset")
	// ErrNotStored: a dispatch of an entry that is not the oldest stored
	// one, or whose records are not the ones stored (dispatch.go).
	ErrNotStored = errors.New("entry not stored")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("store closed")
	// ErrFailed: an earlier write failed half way; the store refuses writes
	// until it is reopened and recovery has cut the partial batch.
	ErrFailed = errors.New("store failed")
)
