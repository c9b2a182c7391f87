// Package rocketmq holds the compatibility tests of raftmq with
// RocketMQ's official clients (issue #15): the unmodified
// github.com/apache/rocketmq-client-go/v2 against raftmq processes. It is
// a module of its own, so the client's dependencies stay out of raftmq's;
// it starts the raftmq binary built from the repository (../..), and
// imports nothing of raftmq.
//
// Files:
//   - route_test.go: route queries through the official client's admin
//     API against a name server's remoting protocol (and the helpers
//     that start raftmq dev);
//   - send_test.go: the official producer's sends (single, compressed,
//     batch, async, one-way) read back by raftmq's own consumer;
//   - consume_test.go: the official push consumer reading raftmq's own
//     producer's messages, and retrying one through the broker;
//   - group_test.go: consumer groups: two members splitting the queues
//     (and the code 40 push that makes it prompt), broadcasting, an
//     orderly consumer (queue locks), a restart resuming from committed
//     offsets; and the producer helpers the tests share;
//   - failover_test.go: a cluster of processes (name server, 3 replicas,
//     secured or not), and the official producer's sends through a kill
//     -9 of the master, every acknowledged one consumed after;
//   - secure_test.go: the official client with UseTls and RocketMQ's
//     access-key signatures on a cluster with TLS and access control;
//   - transaction_test.go: the official transaction producer: commits,
//     rollbacks, and the check-backs pushed on its connection (39)
//     answered with one-way ends (37).
//
// rmqbench/ is the official client's benchmark, which
// deploy/bench-local.sh --rocketmq runs beside raftmq bench.
package rocketmq
