package lazyfs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mounted is a lazyfs on a temporary directory, unmounted at the end.
func mounted(t *testing.T, opts Options) *Mount {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err.Error() + " (CI runs as root with /dev/fuse)")
	}
	backing, dir := t.TempDir(), t.TempDir()
	m, err := New(backing, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

func writeFile(t *testing.T, path string, off int64, data []byte, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func powerLoss(t *testing.T, m *Mount, tear bool) Loss {
	t.Helper()
	loss, err := m.PowerLoss(tear)
	if err != nil {
		t.Fatal(err)
	}
	return loss
}

func wantContent(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s holds %q (%d bytes), want %q (%d bytes)", filepath.Base(path), got[:min(len(got), 64)], len(got), want[:min(len(want), 64)], len(want))
	}
}

func TestWritesSinceTheLastFsyncAreLost(t *testing.T) {
	m := mounted(t, Options{})
	p := filepath.Join(m.Dir, "log")
	writeFile(t, p, 0, []byte("synced."), true)
	writeFile(t, p, 3, []byte("OVERWRITTEN"), false)
	writeFile(t, p, 14, []byte("appended"), false)
	wantContent(t, p, []byte("synOVERWRITTENappended")) // before the cut, reads see every write
	loss := powerLoss(t, m, false)
	wantContent(t, p, []byte("synced."))
	if loss.Files != 1 || loss.Changes != 2 {
		t.Fatalf("loss %+v, want 1 file and 2 changes", loss)
	}
	// The mount works after the power comes back, and an fsync now keeps.
	writeFile(t, p, 7, []byte("+more"), true)
	powerLoss(t, m, false)
	wantContent(t, p, []byte("synced.+more"))
}

func TestATornWriteKeepsItsFirstHalf(t *testing.T) {
	m := mounted(t, Options{})
	p := filepath.Join(m.Dir, "seg")
	writeFile(t, p, 0, nil, true)
	page := bytes.Repeat([]byte{'x'}, 4096)
	writeFile(t, p, 0, page, false)
	writeFile(t, p, 4096, page, false)
	powerLoss(t, m, true)
	wantContent(t, p, page[:2048])
}

func TestATruncateIsUndone(t *testing.T) {
	m := mounted(t, Options{})
	p := filepath.Join(m.Dir, "cq")
	writeFile(t, p, 0, []byte("0123456789"), true)
	if err := os.Truncate(p, 3); err != nil { // by path: no open handle
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(20); err != nil { // by handle
		t.Fatal(err)
	}
	f.Close()
	powerLoss(t, m, false)
	wantContent(t, p, []byte("0123456789"))
}

// No test maps a file of the mount from this process: a page fault on it
// cannot reach a safepoint, so a garbage collection would wait on it while
// the filesystem's own goroutines are stopped (a test hung so). The
// brokers of the power-loss drills write their consume queues and index
// through shared mappings, served from another process.

func TestIgnoreFsyncLosesEverything(t *testing.T) {
	m := mounted(t, Options{IgnoreFsync: true})
	p := filepath.Join(m.Dir, "wal")
	writeFile(t, p, 0, []byte("acknowledged"), true)
	powerLoss(t, m, false)
	wantContent(t, p, nil) // the name survives (names are durable at once), its data does not
}

func TestPastTheLimitTheOldestChangesAreDurable(t *testing.T) {
	m := mounted(t, Options{UnsyncedLimit: 4096})
	p := filepath.Join(m.Dir, "f")
	writeFile(t, p, 0, bytes.Repeat([]byte{'0'}, 4096), true)
	for _, c := range []byte("abc") {
		writeFile(t, p, 0, bytes.Repeat([]byte{c}, 4096), false)
	}
	// Keeping what b and c replaced is 8 KiB: only c's may stay undoable.
	powerLoss(t, m, false)
	wantContent(t, p, bytes.Repeat([]byte{'b'}, 4096))
}

func TestARenameKeepsItsName(t *testing.T) {
	m := mounted(t, Options{})
	dst := filepath.Join(m.Dir, "checkpoint")
	writeFile(t, dst, 0, []byte("old"), true)
	tmp := filepath.Join(m.Dir, "checkpoint.tmp")
	writeFile(t, tmp, 0, []byte("synced"), true)
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
	writeFile(t, tmp, 0, []byte("unsynced"), false)
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
	// The rename was durable, the data it pointed at was not: the classic
	// empty file of a rename without an fsync first.
	powerLoss(t, m, false)
	wantContent(t, dst, nil)
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the renamed file's old name: %v", err)
	}
}

func TestAnUnlinkedFileIsForgotten(t *testing.T) {
	m := mounted(t, Options{})
	p := filepath.Join(m.Dir, "segment")
	writeFile(t, p, 0, bytes.Repeat([]byte{'x'}, 1<<16), false)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if n := len(m.log.files); n != 0 {
		t.Fatalf("%d files' changes kept after their unlink", n)
	}
	if loss := powerLoss(t, m, false); loss.Files != 0 {
		t.Fatalf("loss %+v, want none", loss)
	}
}

// A process the test starts holds no mount's connection: were it to, a
// test binary that died would leave the mounts hanging, kept alive by it.
func TestChildrenDoNotInheritTheConnection(t *testing.T) {
	mounted(t, Options{})
	out, err := exec.Command("sh", "-c", "ls -l /proc/self/fd/").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "/dev/fuse") {
		t.Fatalf("a child inherited /dev/fuse:\n%s", out)
	}
}
