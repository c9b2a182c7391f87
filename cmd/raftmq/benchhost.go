package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// `raftmq bench host` measures the floor a machine puts under a
// synchronous send, so that a sitting's figures can be read against its
// machine: the same build has given sync sends of one client a p50 of
// 0.575 ms on one VM and 1.26 ms on another (broker/README.md,
// 2026-12-05), and on the second a round trip between two processes on
// loopback took 0.11-0.17 ms and a small fdatasync 0.29-0.34 ms, against
// the "≈ 0.35 ms" for two round trips and a sync together.
//
// A lone sync send makes two round trips between processes (the client to
// the master, the master to a follower) and waits for a follower's
// fdatasync: its floor is two round trips and one sync (the issue's
// definition). The other replicas sync the same entry on the same disk at
// about the same time, so the sync among three writers is reported too:
// what sharing the disk adds, not part of the floor.
//
// No acknowledged write of a group whose replicas share one disk makes
// that floor: the master applies an entry once its own log and a
// follower's hold it, two syncs on the one device queue. So the bench also
// starts syncs together in rounds, as a commit's replicas do, and times
// the later of two (the leader's and one follower's, the third a round
// behind: broker/README.md, 2026-12-05 eighth sitting) and the second of
// three; the floor on one disk is two round trips and the later of two.

// hostBench is what `raftmq bench host` adds to the shared flags.
type hostBench struct {
	dir        string
	roundTrips int
	pause      time.Duration
	syncs      int
	echo       bool // the echo process the round trips go to (hidden)
}

// hostFloor is the summary, also its JSON.
type hostFloor struct {
	RoundTripP50 float64 `json:"round_trip_p50_ms"`
	RoundTripP90 float64 `json:"round_trip_p90_ms"`
	SyncP50      float64 `json:"sync_p50_ms"`
	SyncP90      float64 `json:"sync_p90_ms"`
	Sync3P50     float64 `json:"sync3_p50_ms"`
	Sync3P90     float64 `json:"sync3_p90_ms"`
	Floor        float64 `json:"floor_ms"` // 2 round trips + a sync, p50s
	// A commit's syncs on one disk: rounds of syncs started together, the
	// later of two and the second of three.
	Commit2P50 float64 `json:"commit_sync2_p50_ms"`
	Commit3P50 float64 `json:"commit_sync3_p50_ms"`
	// FloorOneDisk is 2 round trips + the later of two syncs together, p50s.
	FloorOneDisk float64 `json:"floor_one_disk_ms"`
}

// The sizes a lone sync send moves: a 1 KiB message out, a short answer back.
const (
	hostSendBytes   = 1024
	hostAnswerBytes = 64
	hostSyncWriters = 3 // a group's replicas on one disk

	// hostRoundPause is between rounds of syncs started together, so
	// that a round starts on a quiet disk, as a lone sender's commit does.
	hostRoundPause = 200 * time.Microsecond

	// The limits: the round trips' times are kept in memory, and each
	// writer's file is written whole with zeros first.
	maxHostRoundTrips = 10_000_000
	maxHostSyncs      = 100_000
)

func benchHostCommand(f *benchFlags) *cobra.Command {
	var hb hostBench
	cmd := &cobra.Command{
		Use:   "host",
		Short: "measure this machine's floor under a sync send: a loopback round trip between processes, a small fdatasync",
		Long: `Measures what no broker can go below on this machine, to read other figures against:
- a round trip between two processes on 127.0.0.1 (1 KiB out, 64 B back), --round-trips of
  them, --pause apart so that both processes go idle in between, as a sync sender's hops do;
- a 1 KiB append and its fdatasync into a file written with zeros first (as the commitlog's
  segments are), --syncs of them in --dir: one writer alone, then three at once (the three
  replicas of a group on one disk);
- a commit's syncs: --syncs rounds of syncs started together, the later of two (the master's
  and a follower's, which a commit waits for) and the second of three.
The floor of a lone sync send is two round trips and one sync (p50s); with the group's
replicas on this one disk, two round trips and the later of two syncs together. With --json
the summary is one JSON object on the last line: round_trip_p50_ms, round_trip_p90_ms,
sync_p50_ms, sync_p90_ms, sync3_p50_ms, sync3_p90_ms, floor_ms, commit_sync2_p50_ms,
commit_sync3_p50_ms, floor_one_disk_ms. --dir must be on the disk the brokers use: on a
tmpfs the sync costs nothing.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if hb.echo {
				return runEcho(cmd.Context(), os.Stdin, os.Stdout)
			}
			return runHostBench(cmd.Context(), *f, hb)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&hb.dir, "dir", ".", "where to write the sync test's files (removed after); on the brokers' disk")
	fl.IntVar(&hb.roundTrips, "round-trips", 2000, "loopback round trips to time")
	fl.DurationVar(&hb.pause, "pause", 200*time.Microsecond, "between round trips")
	fl.IntVar(&hb.syncs, "syncs", 1000, "appends with fdatasync to time, for each writer")
	fl.BoolVar(&hb.echo, "echo", false, "be the process the round trips go to")
	_ = fl.MarkHidden("echo")
	return cmd
}

func runHostBench(ctx context.Context, f benchFlags, hb hostBench) error {
	if hb.roundTrips < 1 || hb.syncs < 1 || hb.pause < 0 {
		return errors.New("--round-trips and --syncs must be positive, --pause not negative")
	}
	if hb.roundTrips > maxHostRoundTrips || hb.syncs > maxHostSyncs {
		return fmt.Errorf("--round-trips at most %d, --syncs at most %d (a file of %d MiB for each of %d writers)",
			maxHostRoundTrips, maxHostSyncs, maxHostSyncs*hostSendBytes>>20, hostSyncWriters)
	}
	trips, err := loopbackRoundTrips(ctx, hb.roundTrips, hb.pause)
	if err != nil {
		return err
	}
	alone, err := appendSyncs(ctx, hb.dir, 1, hb.syncs)
	if err != nil {
		return err
	}
	three, err := appendSyncs(ctx, hb.dir, hostSyncWriters, hb.syncs)
	if err != nil {
		return err
	}
	commit2, err := commitSyncs(ctx, hb.dir, 2, hb.syncs)
	if err != nil {
		return err
	}
	commit3, err := commitSyncs(ctx, hb.dir, 3, hb.syncs)
	if err != nil {
		return err
	}
	var s hostFloor
	s.RoundTripP50, s.RoundTripP90 = p50p90(trips)
	s.SyncP50, s.SyncP90 = p50p90(alone)
	s.Sync3P50, s.Sync3P90 = p50p90(three)
	s.Floor = math.Round((2*s.RoundTripP50+s.SyncP50)*1000) / 1000
	s.Commit2P50, _ = p50p90(commit2)
	s.Commit3P50, _ = p50p90(commit3)
	s.FloorOneDisk = math.Round((2*s.RoundTripP50+s.Commit2P50)*1000) / 1000
	fmt.Printf("loopback round trip between 2 processes, %d B out, %d B back (%d, %v apart): p50 %.3f ms, p90 %.3f ms\n",
		hostSendBytes, hostAnswerBytes, hb.roundTrips, hb.pause, s.RoundTripP50, s.RoundTripP90)
	fmt.Printf("%d B append + fdatasync into a zero-filled file in %s, 1 writer (%d): p50 %.3f ms, p90 %.3f ms\n",
		hostSendBytes, hb.dir, hb.syncs, s.SyncP50, s.SyncP90)
	fmt.Printf("  %d writers at once (%d each): p50 %.3f ms, p90 %.3f ms\n", hostSyncWriters, hb.syncs, s.Sync3P50, s.Sync3P90)
	fmt.Printf("  a commit's syncs, started together (%d rounds): the later of 2 p50 %.3f ms, the second of 3 p50 %.3f ms\n",
		hb.syncs, s.Commit2P50, s.Commit3P50)
	fmt.Printf("a lone sync send's floor here (2 round trips + 1 sync): %.3f ms\n", s.Floor)
	fmt.Printf("  with its group's replicas on this one disk (2 round trips + the later of 2 syncs together): %.3f ms\n", s.FloorOneDisk)
	if f.json {
		b, _ := json.Marshal(s)
		fmt.Println(string(b))
	}
	return nil
}

// loopbackRoundTrips starts this binary again as the echo process and
// times n round trips to it over TCP on 127.0.0.1.
func loopbackRoundTrips(ctx context.Context, n int, pause time.Duration) ([]time.Duration, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench host: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	child := exec.CommandContext(ctx, exe, "bench", "host", "--echo")
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe() // closed: the echo process ends
	if err != nil {
		return nil, fmt.Errorf("bench host: %w", err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench host: %w", err)
	}
	if err := child.Start(); err != nil {
		return nil, fmt.Errorf("bench host: start the echo process: %w", err)
	}
	defer func() { stdin.Close(); _ = child.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "echo ")
	if err != nil || !ok {
		return nil, fmt.Errorf("bench host: the echo process said %q (%v), want its address", line, err)
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench host: %w", err)
	}
	defer conn.Close()
	out, back := make([]byte, hostSendBytes), make([]byte, hostAnswerBytes)
	trips := make([]time.Duration, 0, n)
	for range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := time.Now()
		if _, err := conn.Write(out); err != nil {
			return nil, fmt.Errorf("bench host: round trip: %w", err)
		}
		if _, err := io.ReadFull(conn, back); err != nil {
			return nil, fmt.Errorf("bench host: round trip: %w", err)
		}
		trips = append(trips, time.Since(start))
		time.Sleep(pause)
	}
	return trips, nil
}

// runEcho is the other end of the round trips: it listens on loopback,
// says where on out, answers every hostSendBytes it reads with
// hostAnswerBytes, and ends when in closes (its parent is done or gone).
func runEcho(ctx context.Context, in io.Reader, out io.Writer) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bench host --echo: %w", err)
	}
	var mu sync.Mutex
	var conn net.Conn
	ended := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, in)
		mu.Lock()
		defer mu.Unlock()
		close(ended)
		ln.Close()
		if conn != nil {
			conn.Close()
		}
	}()
	defer ln.Close()
	if _, err := fmt.Fprintf(out, "echo %s\n", ln.Addr()); err != nil {
		return err
	}
	c, err := ln.Accept()
	if err != nil {
		return nil // the parent ended before it dialled
	}
	mu.Lock()
	select {
	case <-ended:
		c.Close()
	default:
		conn = c
	}
	mu.Unlock()
	defer c.Close()
	msg, answer := make([]byte, hostSendBytes), make([]byte, hostAnswerBytes)
	for {
		if _, err := io.ReadFull(c, msg); err != nil {
			return nil // the parent closed the connection, or its stdin
		}
		if _, err := c.Write(answer); err != nil {
			return nil
		}
	}
}

// appendSyncs times n appends of hostSendBytes, each followed by
// fdatasync, by each of writers goroutines at once, each into a file of
// its own in dir that was filled with zeros and synced first: allocated,
// written blocks, the cheapest a sync gets, as the commitlog's by default
// (storage/preallocate.go). The files are removed.
func appendSyncs(ctx context.Context, dir string, writers, n int) ([]time.Duration, error) {
	files, err := zeroFilledFiles(dir, writers, n)
	defer removeFiles(files)
	if err != nil {
		return nil, err
	}
	times := make([][]time.Duration, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() { times[i], errs[i] = timeSyncs(ctx, f, n) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.Concat(times...), nil
}

// commitSyncs times rounds of syncs started together, as a commit's
// replicas start theirs: n rounds, hostRoundPause apart, in which each of
// writers goroutines appends hostSendBytes to a zero-filled file of its
// own in dir and fdatasyncs it. A round's time is its second to finish,
// from the round's start: a commit waits for the master's sync and one
// follower's.
func commitSyncs(ctx context.Context, dir string, writers, n int) ([]time.Duration, error) {
	files, err := zeroFilledFiles(dir, writers, n)
	defer removeFiles(files)
	if err != nil {
		return nil, err
	}
	// Each replica is a process with a thread of Go code of its own: here
	// a writer in its sync must not hold the P another writer waits for
	// (Go hands a P on from a system call late: broker/README.md,
	// 2026-12-05 eighth sitting).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(writers + 1))
	rec := make([]byte, hostSendBytes)
	times := make([]time.Duration, 0, n)
	done := make([]time.Duration, writers)
	errs := make([]error, writers)
	for round := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var wg sync.WaitGroup
		start := time.Now()
		for i, f := range files {
			wg.Go(func() {
				errs[i] = appendSync(f, rec, int64(round*hostSendBytes))
				done[i] = time.Since(start)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		slices.Sort(done)
		times = append(times, done[1])
		time.Sleep(hostRoundPause)
	}
	return times, nil
}

func appendSync(f *os.File, rec []byte, at int64) error {
	if _, err := f.WriteAt(rec, at); err != nil {
		return fmt.Errorf("bench host: %w", err)
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("bench host: fdatasync %s: %w", filepath.Base(f.Name()), err)
	}
	return nil
}

// zeroFilledFiles creates writers files in dir, each of n appends'
// bytes written with zeros and synced. The files made so far come back
// with an error too, for removeFiles.
func zeroFilledFiles(dir string, writers, n int) ([]*os.File, error) {
	files := make([]*os.File, 0, writers)
	zeros := make([]byte, 1<<20)
	for range writers {
		f, err := os.CreateTemp(dir, "raftmq-bench-host-*")
		if err != nil {
			return files, fmt.Errorf("bench host: --dir: %w", err)
		}
		files = append(files, f)
		for left := n * hostSendBytes; left > 0; left -= len(zeros) {
			if _, err := f.Write(zeros[:min(left, len(zeros))]); err != nil {
				return files, fmt.Errorf("bench host: %w", err)
			}
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return files, fmt.Errorf("bench host: fdatasync %s: %w", filepath.Base(f.Name()), err)
		}
	}
	return files, nil
}

func removeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
		os.Remove(f.Name())
	}
}

func timeSyncs(ctx context.Context, f *os.File, n int) ([]time.Duration, error) {
	rec := make([]byte, hostSendBytes)
	times := make([]time.Duration, 0, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := appendSync(f, rec, int64(i*hostSendBytes)); err != nil {
			return nil, err
		}
		times = append(times, time.Since(start))
	}
	return times, nil
}

// p50p90 sorts d and gives its median and 90th percentile, in
// milliseconds to the microsecond.
func p50p90(d []time.Duration) (p50, p90 float64) {
	slices.Sort(d)
	at := func(q float64) float64 {
		return float64(d[min(len(d)-1, int(q*float64(len(d))))].Microseconds()) / 1000
	}
	return at(0.5), at(0.9)
}
