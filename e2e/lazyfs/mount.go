package lazyfs

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Options configure a mount.
type Options struct {
	// UnsyncedLimit bounds the replaced bytes kept for undoing (default
	// 256 MiB): past it, the oldest unsynced changes become durable.
	UnsyncedLimit int64
	// IgnoreFsync makes fsync persist nothing, as a disk whose volatile
	// cache lies about flushes.
	IgnoreFsync bool

	// attrTimeout replaces the package's attrTimeout when set: a test
	// has the kernel fetch attributes again more often, as a long run
	// of a busy mount does.
	attrTimeout time.Duration
}

// Mount is a lazyfs mounted on Dir, passing through to Backing.
type Mount struct {
	Dir, Backing string
	log          *undoLog
	server       *fuse.Server
	attrTimeout  time.Duration
}

// New mounts a lazyfs on dir (an existing, empty directory) over backing
// (an existing directory).
func New(backing, dir string, opts Options) (*Mount, error) {
	if opts.UnsyncedLimit <= 0 {
		opts.UnsyncedLimit = 256 << 20
	}
	m := &Mount{Dir: dir, Backing: backing, log: newUndoLog(opts.UnsyncedLimit, opts.IgnoreFsync), attrTimeout: attrTimeout}
	if opts.attrTimeout > 0 {
		m.attrTimeout = opts.attrTimeout
	}
	if err := m.mount(); err != nil {
		return nil, err
	}
	return m, nil
}

// attrTimeout is how long the kernel keeps a file's attributes. Kept for
// none, every read(2) cost a GETATTR round trip to this server before the
// kernel would serve it (it revalidated stale attributes on each read for
// FUSE's AUTO_INVAL_DATA, since turned off, see mount), which no disk
// costs: raft-wal's open of a 64 MiB segment of 24,000 2 KiB entries, an
// 8-byte read a frame, took 0.66-1.2 s here against 0.017 s on ext4 (0.15
// s with the page cache dropped), and reading the entries back 29-60 µs
// an entry against 5; with attributes kept 1 s, 0.06-0.09 s and 6.4 µs.
// Under the long power-loss drill's load that open took up to 2.6 s, and
// the drills measured this server rather than recovery. Keeping them is
// safe: the mount is the only writer of its backing files, the kernel
// updates what it caches about a file it writes or truncates, and a power
// cut unmounts, taking every cached attribute with it, before it undoes
// anything.
const attrTimeout = time.Second

func (m *Mount) mount() error {
	root, err := newRoot(m.Backing, m.log)
	if err != nil {
		return fmt.Errorf("lazyfs: %w", err)
	}
	zero, attrs := time.Duration(0), m.attrTimeout
	server, err := fs.Mount(m.Dir, root, &fs.Options{
		// Nothing cached about names: the backing directory is the truth.
		// Attributes are cached (attrTimeout says why).
		EntryTimeout: &zero, AttrTimeout: &attrs, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			FsName: "lazyfs", Name: "lazyfs",
			// mount(2) itself, as root: no fusermount needed.
			DirectMount: true,
			// The kernel's page cache is not dropped when it finds a file's
			// mtime or size moved (FUSE's AUTO_INVAL_DATA, go-fuse's
			// default). The mount is the only writer of its files, so what
			// the kernel caches is never older than the backing file; but the
			// drops race the mount's own writes (the likely window: a drop
			// between write(2) copying into a cached page and this server
			// writing the backing file, then a read that caches the page as
			// it was), and every later read gets the old bytes. Twice in 40
			// long power-loss runs a follower read the record it had just
			// applied as zeros (2026-12-02); TestAReadRightAfterAWriteSeesIt
			// read a write back as zeros in 3 of 8 runs with the
			// invalidation on, in none of 20 with it off.
			ExplicitDataCacheControl: true,
			// go-fuse logs every EINTR and unknown opcode otherwise.
			Logger: log.New(io.Discard, "", 0),
		},
	})
	if err != nil {
		return fmt.Errorf("lazyfs: mount %s: %w", m.Dir, err)
	}
	m.server = server
	return closeFUSEOnExec()
}

// closeFUSEOnExec marks this process's /dev/fuse descriptors close-on-exec.
// go-fuse opens them without the flag (fusermount must inherit one), so
// every broker the test started held every mount's connection open; a test
// binary that died (a timeout) then left mounts whose every access hangs,
// kept alive by those brokers, instead of failing with ENOTCONN.
func closeFUSEOnExec() error {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("lazyfs: list descriptors: %w", err)
	}
	for _, e := range fds {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "/dev/fuse" {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
				return fmt.Errorf("lazyfs: close-on-exec /dev/fuse: %w", err)
			}
		}
	}
	return nil
}

// PowerLoss cuts the power: from now nothing written reaches the backing
// files; the mount goes away, taking the kernel's cached pages with it;
// every change not fsynced is undone (with tear, the oldest lost write of
// each file keeps its first half); and the filesystem is mounted again,
// as it would be found at boot. Whatever uses the mount must be gone
// first (kill -9 it): a mount with open files cannot be unmounted.
func (m *Mount) PowerLoss(tear bool) (Loss, error) {
	m.log.cutPower()
	if err := m.abort(); err != nil {
		return Loss{}, err
	}
	if err := m.unmount(); err != nil {
		return Loss{}, err
	}
	loss, err := m.log.undoAll(tear)
	if err != nil {
		return loss, err
	}
	return loss, m.mount()
}

// IgnoreFsync makes fsync persist nothing from now on (or again
// everything), as Options.IgnoreFsync does from the start.
func (m *Mount) IgnoreFsync(ignore bool) {
	m.log.mu.Lock()
	m.log.ignoreFsync = ignore
	m.log.mu.Unlock()
}

// Close unmounts. What was not fsynced stays, as at a clean shutdown.
func (m *Mount) Close() error {
	return m.unmount()
}

// fuseControl is where the kernel lists FUSE connections (fusectl).
const fuseControl = "/sys/fs/fuse/connections"

// abort ends the mount's FUSE connection, as pulling the disk would: the
// requests in flight fail, and no namespace keeps the filesystem alive. An
// unmount alone does not end it while a copy of the mount lives on in
// another mount namespace (ip netns exec makes one per broker, holding
// copies of every mount made before it), and the serving loops then never
// return (seen as a hung power-loss drill).
func (m *Mount) abort() error {
	var st unix.Stat_t
	if err := unix.Stat(m.Dir, &st); err != nil {
		return fmt.Errorf("lazyfs: stat %s: %w", m.Dir, err)
	}
	ctl := filepath.Join(fuseControl, strconv.Itoa(int(unix.Minor(st.Dev))), "abort")
	if _, err := os.Stat(ctl); errors.Is(err, os.ErrNotExist) {
		if err := unix.Mount("fusectl", fuseControl, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("lazyfs: mount fusectl on %s: %w", fuseControl, err)
		}
	}
	if err := os.WriteFile(ctl, []byte("1"), 0); err != nil {
		return fmt.Errorf("lazyfs: abort the FUSE connection of %s: %w", m.Dir, err)
	}
	return nil
}

// unmount waits until the kernel has let go of the last open file of a
// process just killed (its descriptors close as it exits, not at once).
func (m *Mount) unmount() error {
	if m.server == nil {
		return nil
	}
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err = m.server.Unmount(); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("lazyfs: unmount %s: %w", m.Dir, err)
	}
	m.server.Wait()
	m.server = nil
	return nil
}

// Available says why lazyfs cannot mount here, or nil: it needs root and
// /dev/fuse.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("lazyfs needs root to mount")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("lazyfs needs /dev/fuse: %w", err)
	}
	return nil
}
