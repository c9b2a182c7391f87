package main

import (
	"strings"
	"testing"
)

// marks builds marks from kind and time (µs) pairs.
func marks(kv ...any) []mark {
	var m []mark
	for i := 0; i < len(kv); i += 2 {
		m = append(m, mark{kind: kv[i].(string), t: int64(kv[i+1].(int)) * 1000})
	}
	return m
}

func TestMasterRoundsFollowTheAnswers(t *testing.T) {
	// Two rounds; a read while the first entry is out (the reader finding
	// nothing) belongs to neither.
	rounds := masterRounds(marks(
		"read", 0, "read", 30, "ae", 100, "sync", 120, "read", 150, "syncEnd", 300, "ae", 320,
		"resp", 500, "fsm", 560, "answer", 600,
		"read", 900, "ae", 990, "resp", 1400, "fsm", 1450, "answer", 1500,
	))
	if len(rounds) != 2 {
		t.Fatalf("%d rounds, want 2: %v", len(rounds), rounds)
	}
	want := round{"read": 0, "lastRead": 30_000, "ae": 100_000, "ae2": 320_000, "sync": 120_000, "syncEnd": 300_000, "resp": 500_000, "fsm": 560_000, "answer": 600_000}
	for k, v := range want {
		if rounds[0][k] != v {
			t.Errorf("first round %s = %d, want %d", k, rounds[0][k], v)
		}
	}
	if rounds[1]["read"] != 900_000 || rounds[1]["ae"] != 990_000 {
		t.Errorf("second round %v", rounds[1])
	}
	lines := summarize(rounds, masterRole.intervals)
	if !has(lines, "answers written -> next sends read", "p50   300.0") || !has(lines, "round", "p50   900.0") {
		t.Errorf("summary:\n%s", strings.Join(lines, "\n"))
	}
}

func TestFollowerRoundsOpenOnTheSecondRead(t *testing.T) {
	rounds := followerRounds(marks(
		"read", 0, "read", 40, "raft", 60, "write", 90, "sync", 110, "syncEnd", 350, "answer", 370, "fsm", 420,
		"read", 380, "read", 1000, "raft", 1020, "write", 1050, "sync", 1070, "syncEnd", 1300, "answer", 1320,
	))
	if len(rounds) != 2 {
		t.Fatalf("%d rounds, want 2: %v", len(rounds), rounds)
	}
	if r := rounds[0]; r["read"] != 40_000 || r["raft"] != 60_000 || r["answer"] != 370_000 || r["fsm"] != 420_000 {
		t.Errorf("first round %v", r)
	}
	if rounds[1]["read"] != 1_000_000 {
		t.Errorf("second round opened at %d, want 1000000 (the read at 380 found nothing)", rounds[1]["read"])
	}
	if _, ok := rounds[1]["fsm"]; ok {
		t.Errorf("second round has a state machine mark it never saw: %v", rounds[1])
	}
}

func TestClientRoundsOpenOnTheFirstReadAfterAWrite(t *testing.T) {
	rounds := clientRounds(marks(
		"read", 0, "read", 5, "sdk", 30, "sender", 60, "sender", 80, "sender", 150, "write", 170, "write", 220,
		"read", 900, "sdk", 920, "sender", 950, "write", 1000,
	))
	if len(rounds) != 2 {
		t.Fatalf("%d rounds, want 2: %v", len(rounds), rounds)
	}
	want := round{"read": 0, "sdk": 30_000, "sender": 60_000, "lastSender": 150_000, "write": 170_000, "lastWrite": 220_000}
	for k, v := range want {
		if rounds[0][k] != v {
			t.Errorf("first round %s = %d, want %d", k, rounds[0][k], v)
		}
	}
}

func TestSummarizeSaysNoneForAMissingStep(t *testing.T) {
	lines := summarize([]round{{"a": 0}, {"a": 10_000}}, []interval{{name: "a to b", from: "a", to: "b"}, {name: "a to next a", from: "a", to: "a", next: true}})
	if !has(lines, "a to b", "none") || !has(lines, "a to next a", "n=    1", "mean    10.0") {
		t.Errorf("summary:\n%s", strings.Join(lines, "\n"))
	}
}

// has says whether a line holds every one of subs.
func has(lines []string, subs ...string) bool {
	for _, l := range lines {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			return true
		}
	}
	return false
}

// Marks before a role's first round opens (a trace starts mid-round) are
// dropped, not set on a round that is not there.
func TestMarksBeforeTheFirstRoundAreDropped(t *testing.T) {
	f := followerRounds(marks("raft", 0, "sync", 5, "syncEnd", 8, "answer", 10, "fsm", 12, "read", 20, "read", 30))
	if len(f) != 1 || len(f[0]) != 1 || f[0]["read"] != 30_000 {
		t.Errorf("follower rounds %v, want one holding only its read at 30 µs", f)
	}
	m := masterRounds(marks("sync", 0, "resp", 5, "fsm", 8, "answer", 10, "ae", 12, "read", 20))
	if len(m) != 0 {
		t.Errorf("master rounds %v, want none (no AppendEntries after a read)", m)
	}
}
