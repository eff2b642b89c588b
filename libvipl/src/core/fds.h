// The file descriptors the library owns, so that a fork child can close the
// ones it inherited (fork() must not make the child a holder of the parent's
// connections: the peer would not see the parent die).
#pragma once

#include <cerrno>
#include <cstdint>
#include <unistd.h>

namespace vipl {

// Records fd as the library's; returns it (negative values pass through).
// A shared one (of a shareable object) is left open in fork children.
int fd_track(int fd, bool shared = false);
// Leaves fd open in fork children from now on (it became part of a shareable object).
void fd_share(int fd);
// Closes a tracked descriptor.
void fd_close(int fd);
// In the child after fork(): closes every tracked descriptor.  Async-signal-safe.
void fd_close_all_inherited();

// Eventfds as doorbells: a ring adds one (wakes a poller), a drain empties the count.
// Neither changes errno: they run inside calls that report their own.
inline void eventfd_ring(int fd) {
    int saved = errno;
    uint64_t one = 1;
    ssize_t n = write(fd, &one, sizeof one);
    (void)n;
    errno = saved;
}
inline void eventfd_drain(int fd) {
    int saved = errno;
    uint64_t count;
    ssize_t n = read(fd, &count, sizeof count);
    (void)n;
    errno = saved;
}

} // namespace vipl
