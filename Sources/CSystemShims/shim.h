#ifndef COURIER_CSYSTEMSHIMS_SHIM_H
#define COURIER_CSYSTEMSHIMS_SHIM_H

// Linux system calls that Swift cannot call directly (variadic `ioctl` and `syscall`,
// function-like macros, declarations glibc hides without _GNU_SOURCE). Typed `static inline`
// wrappers, no logic. Only Sources/Courier/Placement imports this module.

#include <sys/ioctl.h>
#include <linux/fs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/xattr.h>

/// `ioctl(fd, FS_IOC_GETFLAGS, flags)`: `ioctl` is variadic and `FS_IOC_GETFLAGS` is a
/// function-like macro, neither of which Swift imports.
static inline int courier_get_inode_flags(int fd, int *flags) {
    return ioctl(fd, FS_IOC_GETFLAGS, flags);
}

/// `ioctl(fd, FS_IOC_SETFLAGS, flags)` (see `courier_get_inode_flags`).
static inline int courier_set_inode_flags(int fd, const int *flags) {
    return ioctl(fd, FS_IOC_SETFLAGS, flags);
}

/// `renameat2(2)` (RENAME_EXCHANGE, RENAME_NOREPLACE): glibc declares it only with _GNU_SOURCE,
/// which Swift's Glibc module lacks, so it goes through `syscall`, which is variadic.
static inline int courier_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                                    unsigned int flags) {
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}

/// `syncfs(2)`: declared by glibc only with _GNU_SOURCE, so it goes through `syscall`.
static inline int courier_syncfs(int fd) {
    return (int)syscall(SYS_syncfs, fd);
}

/// `sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE)`: starts writeback of the whole file's dirty
/// pages without waiting for it (declared by glibc only with _GNU_SOURCE).
static inline int courier_start_writeback(int fd) {
    return (int)syscall(SYS_sync_file_range, fd, (off_t)0, (off_t)0, (unsigned int)2);
}

/// `ioctl(dest_fd, FICLONE, src_fd)`: a reflink clone (shared extents, copy on write) of the
/// whole file `src_fd` into `dest_fd`, where the filesystem supports it (Btrfs, XFS, bcachefs);
/// elsewhere it fails (EOPNOTSUPP, EINVAL, EXDEV). `FICLONE` is a function-like macro.
static inline int courier_ficlone(int dest_fd, int src_fd) {
    return ioctl(dest_fd, FICLONE, src_fd);
}

/// `copy_file_range(2)`: declared by glibc only with _GNU_SOURCE, so it goes through `syscall`.
static inline long courier_copy_file_range(int fd_in, long long *off_in, int fd_out, long long *off_out,
                                           unsigned long len, unsigned int flags) {
    return syscall(SYS_copy_file_range, fd_in, off_in, fd_out, off_out, len, flags);
}

#endif
