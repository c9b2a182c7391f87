package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/raftmq/raftmq/client"
	"github.com/spf13/cobra"
)

func healthCommand() *cobra.Command {
	var addr, ca string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health",
		Short: "exit 0 when the node at --addr (its --http address) is serving",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" {
				return errors.New("--addr is required (the node's --http address)")
			}
			tr, scheme := &http.Transport{DisableKeepAlives: true}, "http"
			if ca != "" {
				cfg, err := client.NodeTLSConfig(ca, "", "")
				if err != nil {
					return err
				}
				tr.TLSClientConfig, scheme = cfg, "https"
			}
			c := &http.Client{Timeout: timeout, Transport: tr}
			resp, err := c.Get(scheme + "://" + addr + "/healthz")
			if err != nil {
				return fmt.Errorf("not serving: %w", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("not serving: %s", strings.TrimSpace(string(body)))
			}
			fmt.Println("ok")
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "", "the node's HTTP address HOST:PORT")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for an answer")
	cmd.Flags().StringVar(&ca, "tls-ca", "", "the cluster's CA: ask over HTTPS (a node run with --http-tls)")
	return cmd
}
