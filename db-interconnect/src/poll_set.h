// poll/ppoll/select/pselect over sets that hold interposed sockets.
//
// Each interposed socket is looked at first (a stream may hold data that makes no new
// event on its descriptor), spun on while that pays (libvipl's policy, sock_spin_budget),
// then slept on through what sock_under says (the kernel connection, or the stream's
// descriptor) in one real ppoll together with the program's other descriptors; what the
// kernel reports for a stream is checked against the stream before it is reported.
// select is served through ppoll (so a stream's descriptor above FD_SETSIZE is fine) and
// reports as select does.  Signals end the wait with EINTR, as the kernel's poll does
// whatever SA_RESTART says.
#pragma once

#include "files.h"

#include "kernel_io.h"

#include <poll.h>
#include <signal.h>
#include <sys/select.h>

namespace vipl::db {

// Whether any descriptor of the array is an interposed socket (the fast path's check).
bool poll_has_tracked(const pollfd *fds, nfds_t n) noexcept;
// Every descriptor the kernel's for good (files.h's marks; at least one, so the real
// calls are loaded): the wrapper calls the kernel without a look at anything else.
inline bool poll_all_direct(const pollfd *fds, nfds_t n) noexcept {
    for (nfds_t i = 0; i < n; ++i)
        if (!fd_direct(fds[i].fd)) return false;
    return n > 0;
}
int poll_tracked(pollfd *fds, nfds_t n, Deadline deadline, const sigset_t *mask) noexcept;

bool select_has_tracked(int nfds, const fd_set *r, const fd_set *w, const fd_set *e) noexcept;
// select on sets with interposed sockets; *left gets the time that remained (Linux
// updates select's timeout so).
int select_tracked(int nfds, fd_set *r, fd_set *w, fd_set *e, Deadline deadline,
                   const sigset_t *mask) noexcept;

// A relative timeout as a deadline (null: none).
Deadline deadline_after(const timespec *ts) noexcept;
Deadline deadline_after_ms(int ms) noexcept;

} // namespace vipl::db
