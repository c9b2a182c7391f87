package cluster

import (
	"strings"
	"testing"
	"time"
)

func TestReplayWindowAdmitsEachCounterOnce(t *testing.T) {
	var w sessionWindow
	for _, c := range []uint64{1, 2, 3, 5, 4} { // in order, then one overtaken
		if !w.admit(c) {
			t.Fatalf("counter %d refused the first time", c)
		}
	}
	for _, c := range []uint64{1, 3, 4, 5} {
		if w.admit(c) {
			t.Fatalf("counter %d admitted twice", c)
		}
	}
	if !w.admit(5 + replayWindow) { // a jump past the whole window
		t.Fatal("a counter far ahead refused")
	}
	if w.admit(5) || w.admit(2) { // highest-5 is the window's length
		t.Fatal("a counter older than the window admitted")
	}
	if !w.admit(6) || w.admit(6) { // the oldest the window holds, unseen since the jump
		t.Fatal("the window's oldest counter not admitted exactly once")
	}
	if !w.admit(7+replayWindow) || !w.admit(6+replayWindow) {
		t.Fatal("new counters inside the window refused")
	}
	if w.admit(6 + replayWindow) {
		t.Fatal("a counter admitted twice after the window moved")
	}
	// The bit of a counter one window back is reused: counter c and
	// c+replayWindow share it, and moving past c must clear it for c+N.
	var v sessionWindow
	for c := uint64(1); c <= 3*replayWindow; c += 3 {
		if !v.admit(c) {
			t.Fatalf("counter %d refused", c)
		}
	}
	if !v.admit(3*replayWindow - 1) {
		t.Fatal("an unseen counter inside the window refused after the window wrapped")
	}
}

func TestReplaysBoundSessionsPerKeyAndForgetOldOnes(t *testing.T) {
	p := &ACLPolicy{AccessKeySessions: 2, AccessKeyMaxAge: time.Minute, byKey: map[string]keyOwner{"k": {user: "u"}}}
	var r replays
	now := time.Unix(1000, 0)
	s1, s2, s3 := [16]byte{1}, [16]byte{2}, [16]byte{3}
	if r.admit("k", s1, 1, now, p) != admitted || r.admit("k", s2, 1, now.Add(time.Minute), p) != admitted {
		t.Fatal("two sessions refused")
	}
	if got := r.admit("k", s3, 1, now, p); got != admitFull {
		t.Fatalf("a third session: %v, want refused as full", got)
	}
	if got := r.admit("k", s1, 1, now, p); got != admitReplayed {
		t.Fatalf("a replay in a known session: %v", got)
	}
	r.forget(now.Add(2*time.Minute+time.Second), p) // s1 is 2 × max age old, s2 not
	if n := r.sessions("k"); n != 1 {
		t.Fatalf("%d sessions after forgetting, want 1", n)
	}
	if r.admit("k", s3, 1, now, p) != admitted {
		t.Fatal("a new session refused after an old one was forgotten")
	}
	r.forget(now, &ACLPolicy{AccessKeyMaxAge: time.Minute}) // the key left the policy
	if n := r.sessions("k"); n != 0 {
		t.Fatalf("%d sessions kept for a key no longer in the policy", n)
	}
}

func TestPolicyAccessKeysAreChecked(t *testing.T) {
	for name, tc := range map[string]struct{ body, want string }{
		"short secret":     {"users:\n  a: {accessKeys: [{accessKey: k1, secretKey: short}]}\n", "at least 16"},
		"no access key":    {"users:\n  a: {accessKeys: [{secretKey: 0123456789abcdef}]}\n", "access key of 0 bytes"},
		"a key twice":      {"users:\n  a: {accessKeys: [{accessKey: k1, secretKey: 0123456789abcdef}]}\n  b: {accessKeys: [{accessKey: k1, secretKey: 0123456789abcdeg}]}\n", "both user"},
		"tiny max age":     {"accessKeyMaxAge: 10ms\nusers: {}\n", "at least 1s"},
		"negative session": {"accessKeySessions: -1\nusers: {}\n", "positive"},
	} {
		_, err := parsePolicy([]byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
	p, err := parsePolicy([]byte("users:\n  a: {accessKeys: [{accessKey: k1, secretKey: 0123456789abcdef}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.AccessKeyMaxAge != DefaultAccessKeyMaxAge || p.AccessKeySessions != DefaultAccessKeySessions || p.byKey["k1"].user != "a" {
		t.Fatalf("defaults %v %d, key owner %q", p.AccessKeyMaxAge, p.AccessKeySessions, p.byKey["k1"].user)
	}
}
