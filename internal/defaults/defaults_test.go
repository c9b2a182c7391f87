package defaults

import (
	"testing"
	"time"
)

// A negative value is "off" to IfZero and the default to IfNotPositive;
// a set value is kept by both.
func TestOnlyUnsetFieldsTakeTheDefault(t *testing.T) {
	zero, off, set := time.Duration(0), -time.Duration(1), 5*time.Second
	IfZero(&zero, time.Second)
	IfZero(&off, time.Second)
	IfZero(&set, time.Second)
	if zero != time.Second || off != -1 || set != 5*time.Second {
		t.Errorf("IfZero: got %v, %v, %v", zero, off, set)
	}
	zero, off, set = 0, -1, 5*time.Second
	IfNotPositive(&zero, time.Second)
	IfNotPositive(&off, time.Second)
	IfNotPositive(&set, time.Second)
	if zero != time.Second || off != time.Second || set != 5*time.Second {
		t.Errorf("IfNotPositive: got %v, %v, %v", zero, off, set)
	}
	name := ""
	IfZero(&name, "raftmq")
	if name != "raftmq" {
		t.Errorf("IfZero on a string: got %q", name)
	}
}
