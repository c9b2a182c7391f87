package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/raftmq/raftmq/client"
	"github.com/raftmq/raftmq/message"
)

func dlqCommand() *cobra.Command {
	var ns, group string
	cmd := &cobra.Command{Use: "dlq", Short: "dead-letter queues"}
	namesrvFlag(cmd, &ns)
	resend := &cobra.Command{
		Use:   "resend",
		Short: "send a group's dead letters back to it, through its retry topic",
		Long: `Read the messages in %DLQ%<group> that were not resent yet and send each to
%RETRY%<group>, with its retry count reset, so the group's consumers get them
again. Prints how many were resent.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if group == "" {
				return errors.New("--group is required")
			}
			nsAddrs, err := nameServerAddrs(ns)
			if err != nil {
				return err
			}
			n, err := resendDeadLetters(cmd.Context(), nsAddrs, group)
			if err != nil {
				return err
			}
			fmt.Printf("resent %d messages from %s to %%RETRY%%%s\n", n, client.DLQTopic(group), group)
			return nil
		},
	}
	resend.Flags().StringVar(&group, "group", "", "consumer group")
	cmd.AddCommand(resend)
	return cmd
}

// resendDeadLetters moves the group's dead letters past its committed
// offset on the dead-letter topic to its retry topic, then commits.
func resendDeadLetters(ctx context.Context, nameServers []string, group string) (int, error) {
	opts, err := clientOptions(nameServers, client.WithGroup(group), client.WithDeadLetterReads())
	if err != nil {
		return 0, err
	}
	pc, err := client.NewPullConsumer(opts...)
	if err != nil {
		return 0, err
	}
	if err := pc.Start(); err != nil {
		return 0, err
	}
	defer pc.Shutdown()
	if opts, err = clientOptions(nameServers); err != nil {
		return 0, err
	}
	p, err := client.NewProducer(opts...)
	if err != nil {
		return 0, err
	}
	if err := p.Start(); err != nil {
		return 0, err
	}
	defer p.Shutdown()
	mqs, err := pc.Queues(ctx, client.DLQTopic(group))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", client.DLQTopic(group), err)
	}
	sent := 0
	for _, mq := range mqs {
		off, err := pc.FetchOffset(ctx, mq)
		if err != nil {
			return sent, err
		}
		if off < 0 {
			if off, _, err = pc.Offsets(ctx, mq); err != nil {
				return sent, err
			}
		}
		for {
			r, err := pc.Pull(ctx, mq, "*", off, 32)
			if err != nil {
				return sent, err
			}
			for _, m := range r.Messages {
				props := map[string]string{}
				for k, v := range m.Properties {
					props[k] = v
				}
				props[client.PropertyReconsumeTimes] = "0"
				msg := &client.Message{Topic: message.RetryTopic(group), Tags: m.Tags, Keys: m.Keys, Properties: props, Body: m.Body, Flag: m.Flag}
				if _, err := p.Send(ctx, msg); err != nil {
					return sent, fmt.Errorf("resend %s: %w", m.MsgID, err)
				}
				sent++
			}
			if r.NextOffset == off || r.Status == client.PullNoNewMessage {
				break
			}
			off = r.NextOffset
			if err := pc.CommitOffset(ctx, mq, off); err != nil {
				return sent, err
			}
		}
	}
	return sent, nil
}
