package message

import (
	"errors"
	"fmt"
	"math/rand/v2"
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

// TestFormatIDPrintsWhatItAlwaysPrinted: the id is written by hand (on
// every message a consumer decodes, fmt.Sprintf was 5% of the consume
// bench client's CPU); ids already handed out must read the same, so it
// must print exactly what "%s@%016X" printed.
func TestFormatIDPrintsWhatItAlwaysPrinted(t *testing.T) {
	offsets := []int64{0, 1, 15, 16, 0xABCDEF, 1 << 40, 1<<63 - 1, -1, -1 << 63}
	for range 1000 {
		offsets = append(offsets, rand.Int64N(1<<63-1)>>rand.IntN(63))
	}
	for _, off := range offsets {
		for _, group := range []string{"broker-a", "", "g"} {
			if got, want := FormatID(group, off), fmt.Sprintf("%s@%016X", group, off); got != want {
				t.Fatalf("FormatID(%q, %d) = %q, want %q", group, off, got, want)
			}
		}
	}
}
