// Package pb is raftmq's gRPC contract: the Broker service, its messages,
// and the broker group's Raft commands and snapshot, generated from
// raftmq.proto, and (status.go) the error statuses every server sends, also
// inside a send stream's answers: a
// gRPC status with an ErrorInfo naming an ErrorReason, and (accesskey.go)
// how a request is signed with an access key, and (sendstream.go) the
// batching of sends and answers on a send stream, and (flowwindows.go) the
// static HTTP/2 windows both ends grant and their bounds. The SDK imports
// this package and message, nothing else of raftmq. The generated files
// are committed; regenerate them with
// `go generate ./cluster/pb` after installing protoc (Debian:
// protobuf-compiler) and the plugins at the versions below:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
package pb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative raftmq.proto
