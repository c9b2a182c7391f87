// Command roundtrace reads a Go execution trace of one raftmq process taken
// under synchronous sends (`raftmq bench produce --mode sync`) and prints
// where a round of sends spends its time in that process: each interval
// between two marks of a round, its mean, p50 and p90 in µs over the
// trace's rounds.
//
// A round is the lock-step cycle of synchronous senders: their sends go to
// the master, one Raft entry goes to the followers, the answers come back
// and the senders send again. CPU profiles say what a process spends its
// CPU on; under sync sends the machine is half idle and a round is a chain
// of hand-offs across four processes, so what sets the rate is when each
// step happens, which only a trace shows (broker/README.md, twenty-first
// sitting).
//
// Usage:
//
//	roundtrace master|follower|client < trace.out
//
// master and follower read a broker's trace (raftmq broker --pprof, then
// /debug/pprof/trace?seconds=1 on its pprof address), client the bench's
// (raftmq bench produce --trace FILE). Marks are found by the stacks of
// goroutine state changes: a system call's entry and the goroutine that
// made it, a goroutine blocking or resuming; each role's marks and rounds
// are in its file (master.go, follower.go, client.go), the shared
// arithmetic in rounds.go. The names it looks for are raftmq's, gRPC's and
// hashicorp/raft's functions: a renamed one makes its mark go missing,
// and the interval prints as none.
//
// It is a module of its own: golang.org/x/exp/trace, the parser, is not
// one of the broker's dependencies.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/exp/trace"
)

// role is what roundtrace knows of one kind of process: which trace events
// are marks, how marks make rounds, and the intervals to report.
type role struct {
	mark      func(e trace.Event, s *state) (kind string, ok bool)
	rounds    func(marks []mark) []round
	intervals []interval
}

var roles = map[string]role{
	"master":   masterRole,
	"follower": followerRole,
	"client":   clientRole,
}

func main() {
	if len(os.Args) != 2 || roles[os.Args[1]].rounds == nil {
		fmt.Fprintln(os.Stderr, "usage: roundtrace master|follower|client < trace.out")
		os.Exit(2)
	}
	r := roles[os.Args[1]]
	marks, err := readMarks(os.Stdin, r.mark)
	if err != nil {
		fmt.Fprintln(os.Stderr, "roundtrace:", err)
		os.Exit(1)
	}
	rounds := r.rounds(marks)
	fmt.Printf("%d marks, %d rounds\n", len(marks), len(rounds))
	for _, s := range summarize(rounds, r.intervals) {
		fmt.Println(s)
	}
}

// state is what classifying needs to remember across events: which
// goroutine is which, and who is in a system call.
type state struct {
	role      map[trace.GoID]string // a goroutine's part, learned from where it blocks
	inSyscall map[trace.GoID]string // the mark of the system call a goroutine is in
	waiting   map[trace.GoID]bool   // blocked since its last run
}

// readMarks reads a trace and returns its marks in time order.
func readMarks(in io.Reader, classify func(trace.Event, *state) (string, bool)) ([]mark, error) {
	r, err := trace.NewReader(in)
	if err != nil {
		return nil, err
	}
	s := &state{role: map[trace.GoID]string{}, inSyscall: map[trace.GoID]string{}, waiting: map[trace.GoID]bool{}}
	var marks []mark
	for {
		e, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if e.Kind() != trace.EventStateTransition || e.StateTransition().Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		if kind, ok := classify(e, s); ok {
			marks = append(marks, mark{t: int64(e.Time()), kind: kind})
		}
	}
	sortMarks(marks)
	return marks, nil
}

// stackHas says whether every one of subs is in a function name of the
// event's stack.
func stackHas(e trace.Event, subs ...string) bool {
	var b strings.Builder
	for f := range e.Stack().Frames() {
		b.WriteString(f.Func)
		b.WriteByte('|')
	}
	s := b.String()
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// transition is the goroutine and its states before and after e.
func transition(e trace.Event) (trace.GoID, trace.GoState, trace.GoState) {
	st := e.StateTransition()
	from, to := st.Goroutine()
	return st.Resource.Goroutine(), from, to
}
