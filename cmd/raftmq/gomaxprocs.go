package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// gomaxprocsUsage is the --gomaxprocs flag's help.
const gomaxprocsUsage = "how many threads run Go code at once (Go's GOMAXPROCS): auto (Go's default, the CPUs this process may use, shared among the group's replicas on this host as --peers lists them: all on loopback, or on this replica's own Raft host), all (Go's default, unshared), or a number; the GOMAXPROCS variable, when set, wins"

// setGOMAXPROCS sets how many threads run Go code at once from
// --gomaxprocs, unless the GOMAXPROCS variable is set: it wins, as for any
// Go program. own is this replica's Raft address, peers the group's
// (--peers, this replica among them).
//
// Why auto shares: replicas of one group started on one host, as
// deploy/bench-local.sh and a tryout on a laptop start them, each took
// every CPU, so 3 brokers ran 6 threads of Go code on 2 cores. Each
// hand-off between goroutines then wakes another of its process's
// threads, which finds the cores held by the other replicas' threads:
// with one each, a hand-off runs the goroutine it readies on its own
// thread. 3 brokers on 2 cores, 3 interleaved pairs of
// deploy/bench-local.sh (broker/README.md, 2026-12-05): the brokers'
// thread switches per message halved (a lone sync send 24 to 12), their
// CPU and the bench's per message fell (sync16 7-24%, sync1 8-31%,
// batched 0-16%), 16 sync senders got 4-18% more in all 3 pairs, a lone
// sender's p50 fell in 2 of 3; consume fell in 1 of 3 (the master serves
// it alone, and 1 thread caps it). Go sizes GOMAXPROCS to a container's
// CPU limit itself (Go 1.25); it cannot know of the other replicas on the
// host. A replica alone on its host, the production shape, keeps Go's
// default.
func setGOMAXPROCS(mode, own string, peers map[string]string, log *slog.Logger) error {
	goDefault, onHost := runtime.GOMAXPROCS(0), replicasOnThisHost(own, peers)
	var n int
	switch mode {
	case "auto":
		n = hostShare(goDefault, onHost)
	case "all":
		n = goDefault
	default:
		v, err := strconv.Atoi(mode)
		if err != nil || v < 1 || v > 1<<16 {
			return fmt.Errorf("--gomaxprocs %q: want auto, all or a number of threads, 1 to 65536", mode)
		}
		n = v
	}
	if os.Getenv("GOMAXPROCS") != "" || n == goDefault {
		return nil
	}
	log.Info("GOMAXPROCS set", "gomaxprocs", n, "go_default", goDefault, "mode", mode, "replicas_on_this_host", onHost)
	runtime.GOMAXPROCS(n)
	return nil
}

// hostShare is one replica's share of cpus CPUs among onHost replicas on
// this host: at least one.
func hostShare(cpus, onHost int) int { return max(1, cpus/onHost) }

// replicasOnThisHost counts the replicas of peers (this one among them,
// at own) that run on this host: all of them on loopback when own is
// (security.go's loopback), else those with own's host. Host names are
// compared as written, not resolved. At least 1: this replica.
func replicasOnThisHost(own string, peers map[string]string) int {
	host, _, err := net.SplitHostPort(own)
	n := 0
	for _, addr := range peers {
		h, _, herr := net.SplitHostPort(addr)
		if (loopback(own) && loopback(addr)) || (err == nil && herr == nil && strings.EqualFold(h, host)) {
			n++
		}
	}
	return max(1, n)
}
