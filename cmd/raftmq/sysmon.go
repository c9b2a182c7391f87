package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
)

// sysmonAwake is the GODEBUG setting that keeps Go's system monitor out of
// its deep sleep: the runtime skips that sleep while a scheduler trace is
// asked for, and this one asks for a line every 2^31-1 ms (24.8 days, the
// most it takes). Go prints that line, its scheduler's state, to stderr
// when that long has passed since the machine booted: at a start past
// that uptime, then every 24.8 days.
//
// Why: a server that goes idle between requests for a moment, as a broker
// does between a sync sender's sends, puts the monitor into its deep sleep
// each time, and the next system call wakes it (a futex wake on that
// call's path), after which it polls every 20 µs for a millisecond or more
// before it sleeps again: thousands of thread wakes a second in each
// broker (runtime/proc.go sysmon; golang/go#18236 asks for a knob, open).
// Kept awake, it backs off to a poll every 10 ms once there is nothing to
// retake. Measured (2026-12-05, 3 brokers and the bench on 2 cores,
// broker/README.md): per lone sync send a broker switched threads 14-20
// times, 6-8 of them the monitor's naps; in 9 interleaved pairs, awake,
// the servers spent 5-22% less CPU in every pair, a lone sync sender's
// p50 fell in 7 (equal in 2), batched publish rose in all 9.
const sysmonAwake = "schedtrace=2147483647"

// sysmonUsage is the --sysmon flag's help, on every server command.
const sysmonUsage = "Go's system monitor thread: awake (the process runs again at its start with GODEBUG=" + sysmonAwake + ", fewer thread wakes per request; Go then prints a line of scheduler state to stderr every 24.8 days of uptime) or deep-sleep (Go's default)"

// keepSysmonAwake runs this process again with sysmonAwake in GODEBUG
// (--sysmon awake, the default), unless GODEBUG already sets schedtrace:
// after that exec, or when a user asks for a trace of their own. The
// process keeps its PID, arguments and the rest of its environment. If
// the exec fails it says so and goes on as Go's default has it.
func keepSysmonAwake(mode string) error {
	switch mode {
	case "deep-sleep":
		return nil
	case "awake":
	default:
		return fmt.Errorf("--sysmon %q: want awake or deep-sleep", mode)
	}
	godebug := os.Getenv("GODEBUG")
	if strings.Contains(godebug, "schedtrace=") {
		return nil
	}
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, withGODEBUG(os.Environ(), godebug))
	}
	slog.Warn("--sysmon awake: could not run again with GODEBUG set; Go's monitor keeps its default", "err", err)
	return nil
}

// withGODEBUG is env with GODEBUG replaced by current plus sysmonAwake
// (a process reads the first of duplicate variables).
func withGODEBUG(env []string, current string) []string {
	if current != "" {
		current += ","
	}
	return append(withoutVar(env, "GODEBUG"), "GODEBUG="+current+sysmonAwake)
}

// withoutVar is env without the variable name.
func withoutVar(env []string, name string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
