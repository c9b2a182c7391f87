package main

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestPlanCPUs(t *testing.T) {
	for _, tc := range []struct {
		allowed          []int
		onHost           int
		master, follower []int
		ok               bool
	}{
		{[]int{0, 1}, 3, []int{0}, []int{1}, true},
		{[]int{0, 1, 2, 3, 4, 5, 6, 7}, 3, []int{0, 1}, []int{2, 3, 4, 5, 6, 7}, true},
		{[]int{2, 5, 7}, 2, []int{2}, []int{5, 7}, true},
		{[]int{0, 1, 2, 3}, 1, nil, nil, false}, // alone on its host: not placed
		{[]int{3}, 3, nil, nil, false},          // one CPU: nothing to split
	} {
		got, ok := planCPUs(tc.allowed, tc.onHost)
		if ok != tc.ok || !slices.Equal(got.master, tc.master) || !slices.Equal(got.follower, tc.follower) {
			t.Errorf("planCPUs(%v, %d) = %v, %v; want master %v, follower %v, %v", tc.allowed, tc.onHost, got, ok, tc.master, tc.follower, tc.ok)
		}
	}
}

func TestCheckCPUPlacement(t *testing.T) {
	for _, mode := range []string{"auto", "off"} {
		if err := checkCPUPlacement(mode); err != nil {
			t.Errorf("checkCPUPlacement(%q) = %v", mode, err)
		}
	}
	if err := checkCPUPlacement("master"); err == nil {
		t.Error(`checkCPUPlacement("master") = nil, want an error`)
	}
}

// threadsOn reports whether every thread of this process may run on
// exactly cpus.
func threadsOn(t *testing.T, cpus []int) bool {
	t.Helper()
	tids, err := threadIDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			continue // the thread ended
		}
		if set.Count() != len(cpus) {
			return false
		}
		for _, c := range cpus {
			if !set.IsSet(c) {
				return false
			}
		}
	}
	return true
}

// Every thread of the process moves to the followers' CPUs, then to the
// master's as the replica becomes the master, and back as it stops being it.
func TestFollowPlacement(t *testing.T) {
	allowed, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(allowed) < 2 {
		t.Fatalf("this machine lets the test use %d CPU; placement needs 2", len(allowed))
	}
	defer func() {
		if err := placeThreads(allowed); err != nil {
			t.Errorf("restoring the test's CPUs: %v", err)
		}
	}()
	plan, _ := planCPUs(allowed, 3)
	var master atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		followPlacement(ctx, plan, master.Load, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	defer func() { cancel(); <-done }()
	waitOn := func(cpus []int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !threadsOn(t, cpus) {
			if time.Now().After(deadline) {
				t.Fatalf("threads not all on CPUs %v after 5 s", cpus)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitOn(plan.follower)
	master.Store(true)
	waitOn(plan.master)
	master.Store(false)
	waitOn(plan.follower)
}
