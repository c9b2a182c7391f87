package client

import (
	"fmt"
	"testing"
	"time"
)

func listed(ids ...string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// While the replicas are young, a member they have not heard from yet
// stays listed; once they are not, the replicas' list is the list.
func TestMembersMissingFromYoungReplicasAreKept(t *testing.T) {
	var v memberView
	steps := []struct {
		listed, departed []string
		young            bool
		want             string
	}{
		{[]string{"c1", "c2"}, nil, false, "[c1 c2]"},
		{[]string{"c1"}, nil, true, "[c1 c2]"},            // the whole group restarted: c2 not heard yet
		{[]string{"c1", "c3"}, nil, true, "[c1 c2 c3]"},   // a new member is taken at once
		{[]string{"c1"}, []string{"c3"}, true, "[c1 c2]"}, // c3 seen leaving: dropped at once
		{[]string{"c1"}, nil, false, "[c1]"},              // heard long enough: c2 is gone
	}
	for i, s := range steps {
		if got := fmt.Sprint(v.update("t", listed(s.listed...), listed(s.departed...), s.young)); got != s.want {
			t.Fatalf("step %d: members %s, want %s", i, got, s.want)
		}
	}
	if got := fmt.Sprint(v.update("other", listed("c9"), nil, true)); got != "[c9]" {
		t.Fatalf("another topic's list took this one's: %s", got)
	}
}

func TestMemberHoldCoversAHeartbeatAfterReconnecting(t *testing.T) {
	hb := 100 * time.Millisecond
	if h := memberHold(hb); h < hb+reconnect.Backoff.MaxDelay*6/5 {
		t.Fatalf("hold %v: a member reconnecting after the longest backoff (%v, jittered) and heartbeating (%v) would be dropped", h, reconnect.Backoff.MaxDelay, hb)
	}
}

// A replica that says nothing of how long it has heard (a broker from
// before it did) is taken as old: its list is the list.
func TestReplicasThatDoNotSayTheirAgeAreOld(t *testing.T) {
	hb := 100 * time.Millisecond
	for _, c := range []struct {
		heard time.Duration
		want  bool
	}{{0, false}, {time.Millisecond, true}, {memberHold(hb) - time.Millisecond, true}, {memberHold(hb), false}} {
		if got := young(c.heard, hb); got != c.want {
			t.Errorf("young(%v) = %v, want %v", c.heard, got, c.want)
		}
	}
}
