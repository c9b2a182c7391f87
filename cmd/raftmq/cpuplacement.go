package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// cpuPlacementUsage is the --cpu-placement flag's help.
const cpuPlacementUsage = "which CPUs this replica's threads run on: auto (when the group's replicas share this host, as --gomaxprocs auto counts them: the master on its share of the CPUs this process may use, the other replicas on the rest, moved as the master changes), or off (wherever the kernel puts them)"

// cpuPlan is where a replica of a group on one host runs: on master while
// it is the master, on follower while it is not.
//
// Why: the replicas of a group started on one host (deploy/bench-local.sh,
// a tryout on a laptop) wake each other at every step of a send: the
// master's AppendEntries wakes a follower, its answer wakes the master.
// Over 10 s of sync16 on 2 cores the master's threads waited 2.1 s,
// runnable, for a CPU, each follower's 1.6 s (/proc/PID/task/*/schedstat,
// broker/README.md, 2026-12-08); the likely cause, left to the kernel, is
// a woken replica put on a core another replica holds. With the master
// alone on its core and the followers on the other (deploy/bench-pairs.sh,
// 2026-12-08), 3 pairs: a lone sync sender's p50 0.784x (ahead in 3 of 3;
// 5 more pairs of a taskset by hand: 0.777x, 5 of 5), 16 sync senders
// 1.055x (3 of 3), consume 1.117x (3 of 3), batched publish 0.974x and
// 1.004x; the cost, 16 senders' p99 1.098x (0 of 3). A replica alone on
// its host, the production shape, is not placed.
type cpuPlan struct {
	master, follower []int
}

// planCPUs splits allowed, the CPUs this process may use, between the
// master and the other replicas of onHost replicas on this host: the
// master gets its share as --gomaxprocs auto counts it (at least one), the
// others the rest. false: nothing to place (a replica alone on its host,
// or a single CPU).
func planCPUs(allowed []int, onHost int) (cpuPlan, bool) {
	if onHost < 2 || len(allowed) < 2 {
		return cpuPlan{}, false
	}
	n := hostShare(len(allowed), onHost)
	return cpuPlan{master: allowed[:n], follower: allowed[n:]}, true
}

// startCPUPlacement places this process's threads by role, as --cpu-placement
// says, and keeps them placed as isMaster changes until ctx ends; the
// returned func waits for that. own is this replica's Raft address, peers
// the group's (replicasOnThisHost).
func startCPUPlacement(ctx context.Context, mode, own string, peers map[string]string, isMaster func() bool, log *slog.Logger) (wait func()) {
	if mode != "auto" {
		return func() {}
	}
	allowed, err := allowedCPUs()
	if err != nil {
		log.Warn("--cpu-placement: the CPUs this process may use are unknown; not placed", "err", err)
		return func() {}
	}
	plan, ok := planCPUs(allowed, replicasOnThisHost(own, peers))
	if !ok {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		followPlacement(ctx, plan, isMaster, log)
	}()
	return func() { <-done }
}

// checkCPUPlacement checks --cpu-placement's value.
func checkCPUPlacement(mode string) error {
	if mode != "auto" && mode != "off" {
		return fmt.Errorf("--cpu-placement %q: want auto or off", mode)
	}
	return nil
}

// placementPoll is how often a replica looks whether it became or stopped
// being the master: an election takes hundreds of ms, and until the move a
// new master only shares its core.
const placementPoll = 100 * time.Millisecond

// followPlacement places the threads by isMaster, then again at every
// change of it, until ctx ends. A placement that fails is logged and not
// retried until the next change: the replica still serves, only where the
// kernel puts it.
func followPlacement(ctx context.Context, plan cpuPlan, isMaster func() bool, log *slog.Logger) {
	t := time.NewTicker(placementPoll)
	defer t.Stop()
	master := isMaster()
	plan.place(master, log)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := isMaster(); now != master {
			master = now
			plan.place(master, log)
		}
	}
}

// place moves the threads to the master's CPUs or the followers'.
func (p cpuPlan) place(master bool, log *slog.Logger) {
	cpus := p.follower
	if master {
		cpus = p.master
	}
	if err := placeThreads(cpus); err != nil {
		log.Warn("--cpu-placement: could not place this replica's threads", "master", master, "cpus", cpus, "err", err)
		return
	}
	log.Info("CPUs placed", "master", master, "cpus", cpus)
}

// allowedCPUs lists the CPUs this process may run on (its affinity, which
// taskset or a container's cpuset may have narrowed), in order.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// placeThreads sets the affinity of every thread of this process to cpus.
// Affinity is a thread's: Go runs goroutines on threads it may start at any
// time, each inheriting its creator's, so the threads are listed again
// until a pass finds none it has not placed, at most 5 times (a thread
// still new after those keeps its creator's CPUs, until the next move).
func placeThreads(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	done := map[int]bool{}
	for pass := 0; pass < 5; pass++ {
		tids, err := threadIDs()
		if err != nil {
			return err
		}
		fresh := 0
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			fresh++
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) { // ESRCH: the thread ended
				return fmt.Errorf("sched_setaffinity of thread %d: %w", tid, err)
			}
			done[tid] = true
		}
		if fresh == 0 {
			return nil
		}
	}
	return nil
}

// threadIDs lists this process's threads (/proc/self/task).
func threadIDs() ([]int, error) {
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(entries))
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
