// Package lazyfs is a FUSE filesystem that loses, on command, what a disk
// would lose at a power cut: every write its file has not fsynced since.
// It passes every operation through to a backing directory, and before a
// file's data or size changes it keeps what the change replaces; fsync
// forgets what it kept for that file; PowerLoss unmounts, puts back what
// was kept, newest first, and mounts again. That is LazyFS's idea (the
// tool Jepsen and etcd's robustness tests run under NATS, Redpanda and
// etcd), built as an undo log so that reads, mmap and sizes are simply
// the backing file's.
//
// What it models, and what it does not:
//   - Data and size changes (write, mmap writeback, truncate, fallocate)
//     are lost unless their file was fsynced (fsync, fdatasync, msync)
//     after them. Lost changes go newest first, so what survives is always
//     a prefix of the file's history; with a tear, the oldest lost write
//     of each file keeps its first half, as a torn page would.
//   - What it keeps is bounded (Options.UnsyncedLimit): past it, the oldest
//     kept changes become durable, as a kernel writes dirty pages back on
//     its own.
//   - Names (create, rename, unlink, mkdir) are durable at once: a file
//     created and never fsynced survives empty, not absent. That is kinder
//     than ext4, which may lose the name too; it is what LazyFS models.
//   - Options.IgnoreFsync makes fsync persist nothing: a disk that lies.
//     The drills' control run uses it to show that they can fail.
//   - A read returns what was written, at once: the kernel's page cache
//     of a file is kept, never dropped because the file's mtime moved
//     (mount.go says why; coherence_test.go is the test).
//
// Files:
//   - mount.go: Mount, PowerLoss and Close: the mount's life.
//   - undolog.go: the undo log of unsynced changes, by backing inode.
//   - node.go: the FUSE node and file handle that record before they change a file.
//
// It needs root (or CAP_SYS_ADMIN) and /dev/fuse; CI has both. Use the
// mount from other processes, or with plain system calls: a mapping of one
// of its files in the serving process can deadlock it (a page fault cannot
// reach a garbage collection's safepoint while the server is stopped).
package lazyfs
