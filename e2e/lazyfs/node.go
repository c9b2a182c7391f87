package lazyfs

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a loopback node whose files record their changes in the mount's
// undo log before making them.
type node struct {
	fs.LoopbackNode
	log *undoLog
}

var (
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil)
	_ fs.NodeRenamer   = (*node)(nil)
)

func newRoot(backing string, log *undoLog) (*node, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, err
	}
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	// NewNode is how every node a lookup or create makes is ours.
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, log: log}
	}
	n := root.NewNode(root, nil, "", &st).(*node)
	root.RootNode = n
	return n, nil
}

func (n *node) backingPath(name string) string {
	return filepath.Join(n.RootData.Path, n.Path(n.Root()), name)
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return n.wrap(fh), fuseFlags, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return in, n.wrap(fh), fuseFlags, 0
}

func (n *node) wrap(fh fs.FileHandle) fs.FileHandle {
	lf := fh.(*fs.LoopbackFile)
	fd, _ := lf.PassthroughFd()
	return &file{lf: lf, fd: fd, log: n.log}
}

// Setattr with a size and no open handle (truncate(2) of a path).
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	size, ok := in.GetSize()
	if f != nil || !ok {
		return n.LoopbackNode.Setattr(ctx, f, in, out)
	}
	file, err := os.OpenFile(n.backingPath(""), os.O_RDWR, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer file.Close()
	errno := syscall.Errno(0)
	err = n.log.change(int(file.Fd()), int64(size), math.MaxInt64, 0, func() error {
		errno = n.LoopbackNode.Setattr(ctx, f, in, out)
		return nil
	})
	if err != nil {
		return fs.ToErrno(err)
	}
	return errno
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.unlinking(name, func() syscall.Errno { return n.LoopbackNode.Unlink(ctx, name) })
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	target := filepath.Join(newParent.EmbeddedInode().Path(n.Root()), newName)
	var st syscall.Stat_t
	replaced := syscall.Lstat(filepath.Join(n.RootData.Path, target), &st) == nil
	errno := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
	if errno == 0 && replaced {
		n.log.unlinked(st.Ino)
	}
	return errno
}

// unlinking runs an unlink of name and lets go of the changes kept for
// the file it removed, if no other name links it.
func (n *node) unlinking(name string, unlink func() syscall.Errno) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Lstat(n.backingPath(name), &st); err != nil {
		return fs.ToErrno(err)
	}
	errno := unlink()
	if errno == 0 {
		n.log.unlinked(st.Ino)
	}
	return errno
}

// file is a loopback file handle whose data and size changes are recorded
// first. It must not offer its descriptor for FUSE passthrough: the kernel
// would then write the backing file without asking.
type file struct {
	lf  *fs.LoopbackFile
	fd  int
	log *undoLog
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileSetattrer = (*file)(nil)
	_ fs.FileAllocater = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
	_ fs.FileGetlker   = (*file)(nil)
	_ fs.FileSetlker   = (*file)(nil)
	_ fs.FileSetlkwer  = (*file)(nil)
)

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n := len(data)
	err := f.log.change(f.fd, off, off+int64(len(data)), int64(len(data)), func() error {
		var err error
		n, err = unix.Pwrite(f.fd, data, off)
		return err
	})
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	return uint32(n), 0
}

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	// The backing file needs no fsync: the host does not lose power.
	return fs.ToErrno(f.log.synced(f.fd))
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	size, ok := in.GetSize()
	if !ok {
		return f.lf.Setattr(ctx, in, out)
	}
	errno := syscall.Errno(0)
	if err := f.log.change(f.fd, int64(size), math.MaxInt64, 0, func() error {
		errno = f.lf.Setattr(ctx, in, out)
		return nil
	}); err != nil {
		return fs.ToErrno(err)
	}
	return errno
}

func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	errno := syscall.Errno(0)
	if err := f.log.change(f.fd, int64(off), int64(off+size), 0, func() error {
		errno = f.lf.Allocate(ctx, off, size, mode)
		return nil
	}); err != nil {
		return fs.ToErrno(err)
	}
	return errno
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.lf.Read(ctx, buf, off)
}
func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Getattr(ctx, out)
}
func (f *file) Release(ctx context.Context) syscall.Errno { return f.lf.Release(ctx) }
func (f *file) Flush(ctx context.Context) syscall.Errno   { return f.lf.Flush(ctx) }
func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.lf.Lseek(ctx, off, whence)
}
func (f *file) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return f.lf.Getlk(ctx, owner, lk, flags, out)
}
func (f *file) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.lf.Setlk(ctx, owner, lk, flags)
}
func (f *file) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.lf.Setlkw(ctx, owner, lk, flags)
}
