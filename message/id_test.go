package message

import (
	"errors"
	"testing"
)

func TestIDRoundTrips(t *testing.T) {
	for _, off := range []int64{0, 1, 1 << 40, 1<<63 - 1} {
		id := FormatID("broker-a", off)
		g, got, err := ParseID(id)
		if err != nil || g != "broker-a" || got != off {
			t.Fatalf("%q parses to %q %d %v", id, g, got, err)
		}
	}
}

func TestParseIDRefusesWhatIsNotAnID(t *testing.T) {
	for _, bad := range []string{"", "x", "g@12", "g@zzzzzzzzzzzzzzzz", "@0000000000000001", "g@FFFFFFFFFFFFFFFF"} {
		if _, _, err := ParseID(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("ParseID(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}
