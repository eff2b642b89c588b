// The file descriptors the library owns, so that a fork child can close the
// ones it inherited (fork() must not make the child a holder of the parent's
// connections: the peer would not see the parent die).
#pragma once

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

} // namespace vipl
