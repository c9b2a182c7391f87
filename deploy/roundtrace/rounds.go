package main

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
)

// mark is one step of a round seen in a trace: when (ns) and which step.
type mark struct {
	t    int64
	kind string
}

func sortMarks(m []mark) {
	slices.SortStableFunc(m, func(a, b mark) int { return cmp.Compare(a.t, b.t) })
}

// round holds the time of each named step of one round; a step not seen
// is absent.
type round map[string]int64

// interval is from one step of a round to another, the latter in the next
// round when next is set.
type interval struct {
	name, from, to string
	next           bool
}

// summarize prints each interval's mean, p50 and p90 in µs over the rounds
// that hold both its steps, the last round only as the next of another.
func summarize(rounds []round, intervals []interval) []string {
	var out []string
	for _, iv := range intervals {
		var v []float64
		for i := 0; i+1 < len(rounds); i++ {
			a, ok := rounds[i][iv.from]
			to := rounds[i]
			if iv.next {
				to = rounds[i+1]
			}
			b, ok2 := to[iv.to]
			if ok && ok2 && b >= a {
				v = append(v, float64(b-a)/1000)
			}
		}
		if len(v) == 0 {
			out = append(out, fmt.Sprintf("%-40s none", iv.name))
			continue
		}
		sort.Float64s(v)
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		out = append(out, fmt.Sprintf("%-40s n=%5d  mean %7.1f  p50 %7.1f  p90 %7.1f µs", iv.name, len(v), sum/float64(len(v)), v[len(v)/2], v[len(v)*9/10]))
	}
	return out
}

// A nil round is none open: it holds no step, and setting one does
// nothing, so that the role's builders need not ask first.

// has says whether the round holds step.
func (r round) has(step string) bool {
	_, ok := r[step]
	return ok
}

// setFirst records step at t unless the round has it already.
func (r round) setFirst(step string, t int64) {
	if r != nil && !r.has(step) {
		r[step] = t
	}
}

// setLast records step at t, over an earlier one.
func (r round) setLast(step string, t int64) {
	if r != nil {
		r[step] = t
	}
}

// closeRound adds r, when one is open, to rounds.
func closeRound(rounds []round, r round) []round {
	if r == nil {
		return rounds
	}
	return append(rounds, r)
}
