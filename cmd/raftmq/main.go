// Command raftmq is raftmq's one binary: the broker replica, and (with
// their issues) the name server, the local dev cluster and the admin and
// client commands.
package main

import (
	"fmt"
	"os"

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
		fmt.Fprintln(os.Stderr, "raftmq:", err)
		os.Exit(1)
	}
}
