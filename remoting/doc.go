// Package remoting speaks RocketMQ's remoting protocol, so RocketMQ's
// official clients work with raftmq unchanged (issue #15): the frame and
// its two header encodings, a server that answers every request on its
// connection, the sharing of one port with gRPC, and the answers' shapes
// RocketMQ clients rely on. The nodes (namesrv, and later broker) give it
// handlers that call their native services: it keeps no state of its own.
// So far: name servers' route queries; brokers' sends, heartbeats, member
// lists, pulls, offsets, send-back, queue locks, the members-changed
// push (40), and transactions: the end (37, one-way) and the check-back
// push (39).
//
// Files:
//   - frame.go: frames (length, header encoding and length, header,
//     body), JSON and RocketMQ binary headers, their bounds;
//   - server.go: connections: frames read with a cap (a malformed one
//     closes the connection), requests handled concurrently up to a cap
//     per connection, answers with the request's opaque, RocketMQ's "not
//     supported" for codes without a handler, no answer to a one-way
//     request; requests pushed to a client
//     (Conn.Push), and the end of a connection reported (OnClose);
//   - demux.go: gRPC and remoting on one port, told apart by the first
//     byte (HTTP/2's preface against a frame's length); with TLS the demux
//     does the handshake first (ShareTLS) and gRPC takes the connections
//     as they are (HandshakenTLS);
//   - route.go: route answers in RocketMQ's JSON shape (code 105);
//   - send.go: producers' sends (codes 10, 310, 320: long and short
//     header names, batches, zlib bodies, properties, tags and keys) as
//     native SendMessageRequests;
//   - consume.go: consumers' heartbeat bodies, the member list (38), the
//     pull, offset and send-back codes (11, 14, 15, 29, 30, 31, 36), queue
//     lock bodies (41, 42) and RocketMQ's stored-message layout, in which
//     pulled records are answered;
//   - transaction.go: the end of a transaction (37), the check-back push
//     (39), and the offset message id a half's send is answered with.
//
// What RocketMQ's clients send and expect was read from their sources
// (apache/rocketmq-client-go v2, the Java client's remoting codes); each
// file cites the part it follows.
package remoting
