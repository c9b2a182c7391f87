// Package message is the format a message has from the producer to the
// disk: a record in the commitlog's layout, the unique key producers put on
// every message, the topic-name rule and message ids. It imports only the
// standard library, so the SDK (client), the broker and storage share one
// codec without the SDK linking what the server is built of (raft,
// memberlist, bbolt, mmap).
//
// A producer encodes each message once (Append); the broker's master checks
// the bytes in place (Frame, Check) and stamps its store time
// (SetStoreTime); every replica's store writes the fields it assigns
// (Fill) and appends the bytes as they came. Nothing on the way decodes a
// message into fields and encodes it again.
//
// Files:
//   - message.go: Message and Record, the unique-key property, the
//     topic-name rule and tag hashes, the errors.
//   - names.go: the other names the contract fixes, RocketMQ's: retry,
//     dead-letter and schedule topics, the retry path's properties, the
//     topic permission bits.
//   - record.go: the record layout; encoding (Size, Append; a unique key
//     beside the properties, UniqKey), framing and checking in place
//     (Frame, View, Check), decoding (Decode), and the header fields a
//     store reads and writes without decoding.
//   - id.go: message ids, GROUP@OFFSET.
package message
