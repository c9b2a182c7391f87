package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/raftmq/raftmq/namesrv"
)

func namesrvCommand() *cobra.Command {
	var cfg namesrv.Config
	var join, level, sysmon string
	var sec nodeSecurity
	cmd := &cobra.Command{
		Use:   "namesrv",
		Short: "run a name server",
		Long: `Run a name server. It joins the cluster's gossip pool (through --join), learns
the brokers and their topic tables, and answers clients' route queries. It
keeps nothing on disk: restarted, it has complete routes again within
seconds.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := keepSysmonAwake(sysmon); err != nil {
				return err
			}
			log, err := newLogger(level)
			if err != nil {
				return err
			}
			cfg.Logger = log
			cfg.Join = splitList(join)
			cfg.HTTPTLS, cfg.DisableRemoting = sec.HTTPTLS, sec.NoRemoting
			if cfg.TLS, cfg.SecretKey, err = sec.load(); err != nil {
				return err
			}
			if cfg.ACL, err = sec.loadACL(cfg.TLS, log); err != nil {
				return err
			}
			if cfg.ACL != nil {
				defer cfg.ACL.Close()
			}
			if err := sec.checkPlaintext(cfg.TLS != nil, cfg.SecretKey != nil,
				map[string]string{"grpc": cfg.GRPCAddr}, map[string]string{"gossip": cfg.GossipAddr}); err != nil {
				return err
			}
			s, err := namesrv.Start(cfg)
			if err != nil {
				return err
			}
			fmt.Printf("namesrv %s\n", s.Addr())
			waitForSignal(cmd.Context(), log)
			return s.Close()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.GRPCAddr, "grpc", "127.0.0.1:9876", "gRPC listen address")
	fl.StringVar(&cfg.AdvertiseGRPC, "advertise-grpc", "", "gRPC address others are told (default --grpc)")
	fl.StringVar(&cfg.GossipAddr, "gossip", "127.0.0.1:9877", "gossip address (TCP and UDP)")
	fl.StringVar(&cfg.AdvertiseGossip, "advertise-gossip", "", "gossip address others reach (default --gossip; a host name is resolved)")
	fl.StringVar(&join, "join", "", "gossip members to join: HOST:PORT,...")
	fl.StringVar(&cfg.HTTPAddr, "http", "", "HTTP address for /metrics (Prometheus) and /healthz (off when empty)")
	fl.StringVar(&cfg.Cluster, "cluster", "raftmq", "cluster name")
	fl.StringVar(&cfg.Name, "name", "", "unique member name (default namesrv@GRPC)")
	fl.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&sysmon, "sysmon", "awake", sysmonUsage)
	sec.flags(cmd)
	return cmd
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// waitForSignal returns on SIGINT, SIGTERM or ctx's end.
func waitForSignal(ctx context.Context, log *slog.Logger) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	select {
	case sig := <-sigs:
		log.Info("stopping", "signal", sig.String())
	case <-ctx.Done():
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
