// Command raftmq is raftmq's one binary: the broker replica (broker.go),
// the name server (namesrv.go), the local dev cluster (dev.go), and the
// admin and client commands: topics and the cluster (admin.go, check.go),
// produce, consume and bench (produce.go, consume.go, bench.go; the timer
// bench in benchtimers.go, the machine's floor under a sync send in
// benchhost.go), a group's replicas (replicas.go), consumer
// groups (inspect.go: progress and message queries; groups.go: members,
// reset-offset), dead letters (dlq.go), health (health.go), certificates
// and the client's and node's security flags (certs.go, security.go), and
// the servers' run again with Go's system monitor kept awake (sysmon.go),
// and a broker's share of the host's CPUs among its group's replicas
// there (gomaxprocs.go), which of those CPUs it runs on as master or
// follower (cpuplacement.go), and whether its followers are paced as
// spares when they share the host (sparefollowers.go).
package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/experimental"

	"github.com/raftmq/raftmq/broker"
)

func init() {
	// Every server and client of this process takes its gRPC buffers
	// from the broker's pool, whose tiers fit a batch (broker/grpcbuffers.go).
	experimental.SetDefaultBufferPool(broker.BufferPool())
}

func main() {
	root := &cobra.Command{
		Use:           "raftmq",
		Short:         "raftmq: a RocketMQ-style message broker whose broker groups replicate through Raft",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(brokerCommand(), namesrvCommand(), devCommand(), topicCommand(), clusterCommand(), produceCommand(), consumeCommand(), groupCommand(), msgCommand(), dlqCommand(), healthCommand(), benchCommand(), certsCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "raftmq:", userMessage(err))
		os.Exit(1)
	}
}

// grpcPrefix is what gRPC puts before a status's message.
var grpcPrefix = regexp.MustCompile(`rpc error: code = (\w+) desc = `)

// userMessage is err as a user reads it: a server's answer without gRPC's
// "rpc error: code = NotFound desc =" framing, its code after it.
func userMessage(err error) string {
	msg := err.Error()
	if m := grpcPrefix.FindStringSubmatch(msg); m != nil {
		msg = strings.Replace(msg, m[0], "", 1) + " (" + m[1] + ")"
	}
	return msg
}
