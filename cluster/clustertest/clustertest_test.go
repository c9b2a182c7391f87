package clustertest

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestWaitForStateNamesWhatItLastSaw(t *testing.T) {
	f := &fatalRecorder{TB: t}
	polls := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		WaitForState(f, 30*time.Millisecond, "the thing", func() (bool, string) {
			polls++
			return false, fmt.Sprintf("poll %d", polls)
		})
	}()
	<-done
	if want := fmt.Sprintf("the thing: not within 30ms; last seen: poll %d", polls); f.msg != want {
		t.Fatalf("failed with %q, want %q", f.msg, want)
	}
	f.msg = ""
	calls := 0
	WaitForState(f, time.Second, "ok at once", func() (bool, string) { calls++; return calls == 3, "" })
	if f.msg != "" || calls != 3 {
		t.Fatalf("a cond that holds on its third poll: %d polls, failure %q", calls, f.msg)
	}
	done = make(chan struct{})
	go func() {
		defer close(done)
		WaitFor(f, 20*time.Millisecond, "never", func() bool { return false })
	}()
	<-done
	if f.msg != "never: not within 20ms" {
		t.Fatalf("WaitFor failed with %q", f.msg)
	}
}

// A port another process has claimed is not given, though it is free to
// bind: two packages' tests walking the range at once once both bound one
// (clustertest.go). The other process is played by a second open file
// description of the port's file, whose flock conflicts as another
// process's does.
func TestFreeAddrsSkipsAPortAnotherProcessClaimed(t *testing.T) {
	// Claim as another process the walk's first port that no process
	// holds (a real other process may hold some), and point the walk at
	// it.
	var other *os.File
	k := int(nextPort.Load())
	for other == nil {
		k++
		port := portLow + k%portCount
		claims.Lock()
		_, mine := claims.held[port]
		claims.Unlock()
		if mine {
			continue
		}
		var err error
		if other, err = lockPortFile(port); err != nil {
			t.Fatal(err)
		}
	}
	defer other.Close()
	nextPort.Store(int32(k - 1))
	taken := fmt.Sprintf("127.0.0.1:%d", portLow+k%portCount)
	if got := FreeAddrs(t, 1)[0]; got == taken {
		t.Fatalf("FreeAddrs gave %s, which another process holds", got)
	}
}
