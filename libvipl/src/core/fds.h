// The file descriptors the library owns, so that a fork child can close the
// ones it inherited (fork() must not make the child a holder of the parent's
// connections: the peer would not see the parent die).
#pragma once

namespace vipl {

// Records fd as the library's; returns it (negative values pass through).
int fd_track(int fd);
// Closes a tracked descriptor.
void fd_close(int fd);
// In the child after fork(): closes every tracked descriptor.  Async-signal-safe.
void fd_close_all_inherited();

} // namespace vipl
