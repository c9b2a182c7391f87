// Command raftmq is raftmq's one binary: the broker replica, and (with
// their issues) the name server, the local dev cluster and the admin and
// client commands.
package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
)

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
