package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWALToMove(t *testing.T) {
	for _, c := range []struct {
		name  string
		holds []string
		want  bool
	}{
		{"a new directory", nil, false},
		{"a WAL", []string{walDirName + "/"}, true},
		{"a member in the commitlog", []string{inCommitlogMarker, boltFileName}, false},
		{"a move begun", []string{walDirName + "/", movingMarker}, true},
		{"a move whose end a crash cut short", []string{walDirName + "/", movingMarker, inCommitlogMarker}, true},
		{"a bolt log from before the WAL", []string{boltFileName}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := dirHolding(t, c.holds...)
			if got, err := WALToMove(dir); err != nil || got != c.want {
				t.Fatalf("WALToMove: %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

// A move begun goes on only in the commitlog: a start on the WAL is
// refused, and a start that lets the directory choose takes the
// commitlog.
func TestAMoveBegunGoesOnInTheCommitlogOnly(t *testing.T) {
	dir := dirHolding(t, walDirName+"/", movingMarker)
	if _, err := CheckRaftLogPlace(dir, false); err == nil || !strings.Contains(err.Error(), "began moving its Raft log into the commitlog") {
		t.Fatalf("a start on the WAL of a move begun: %v", err)
	}
	if in, err := RaftLogInCommitlog(dir); err != nil || !in {
		t.Fatalf("RaftLogInCommitlog of a move begun: %v, %v", in, err)
	}
}

func TestFinishWALMove(t *testing.T) {
	dir := dirHolding(t, walDirName+"/", movingMarker)
	if err := FinishWALMove(dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{inCommitlogMarker: true, movingMarker: false, walDirName: false} {
		if got, err := fileExists(filepath.Join(dir, name)); err != nil || got != want {
			t.Fatalf("after the move %s is there: %v, %v; want %v", name, got, err, want)
		}
	}
	// A start in the commitlog removes a WAL the end of a move left.
	if err := os.Mkdir(filepath.Join(dir, walDirName), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := claimLogPlace(RaftConfig{Dir: dir, EntryLog: nopEntryLog{}, RecordsAt: func(d []byte) int { return len(d) }}); err != nil {
		t.Fatal(err)
	}
	if got, _ := fileExists(filepath.Join(dir, walDirName)); got {
		t.Fatal("a start in the commitlog left the moved WAL")
	}
}

// dirHolding is a directory holding names (a trailing / makes a
// directory).
func dirHolding(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		p := filepath.Join(dir, strings.TrimSuffix(n, "/"))
		var err error
		if strings.HasSuffix(n, "/") {
			err = os.Mkdir(p, 0o755)
		} else {
			err = os.WriteFile(p, nil, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// nopEntryLog stands for a store in claimLogPlace, which only asks
// whether there is one.
type nopEntryLog struct{ EntryLog }
