package main

import (
	"fmt"
	"time"
)

// spareFollowersUsage is the --raft-spare-followers flag's help.
const spareFollowersUsage = "how often the master sends a follower that commits do not wait for (in a group of 3, the one behind) the entries that came meanwhile, in one request: auto (every 5ms when all of the group's replicas run on this host as --peers lists them, else off), a duration up to 100ms, or off (every follower gets each entry at once). An entry of 8 KiB or more goes to every follower at once either way"

// autoSpareInterval is auto's interval for a group whose replicas all run
// on this host: a spare then syncs 5-10 entries at a time under one
// synchronous sender (a lone send takes 0.5-1.0 ms on the VMs of
// broker/README.md), and a slave's copy stays within about 10 ms of the
// master's.
const autoSpareInterval = 5 * time.Millisecond

// spareFollowerInterval resolves --raft-spare-followers into
// cluster.RaftConfig.SpareFollowerInterval, 0 for off. own is this
// replica's Raft address, peers the group's (--peers, this replica among
// them).
//
// Why auto paces spares only where the whole group runs on this host: its
// replicas then share a disk, on which a spare's fsync of each entry
// queues beside the two a commit waits for. There, 8 alternated pairs
// against off (broker/README.md, 2026-12-06, thirteenth sitting) gave a
// lone sync sender's p50 0.90x and its CPU a message 0.85x, ahead in all
// 8; batched publish 0.98x and send to receive 1.00x (4 of 8 each); and
// 16 sync senders, over 17 pairs of the rule before it (which holds the
// requests of senders that move in step as this one does), ahead in 9.
// Where each replica has its own disk a third fsync costs the others
// nothing, and a commit takes the faster of two followers: a hedge against
// one follower's stall that a spare gives up for up to 2 ms
// (cluster.sparePatience).
func spareFollowerInterval(mode, own string, peers map[string]string) (time.Duration, error) {
	switch mode {
	case "off":
		return 0, nil
	case "auto":
		if len(peers) > 1 && replicasOnThisHost(own, peers) == len(peers) {
			return autoSpareInterval, nil
		}
		return 0, nil
	}
	d, err := time.ParseDuration(mode)
	if err != nil || d <= 0 || d > 100*time.Millisecond {
		return 0, fmt.Errorf("--raft-spare-followers %q: want auto, a duration up to 100ms, or off", mode)
	}
	return d, nil
}
