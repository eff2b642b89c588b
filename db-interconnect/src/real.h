// The real socket calls: the next definition after ours (dlsym RTLD_NEXT), looked up once.
//
// Every wrapper that passes a call through, and every call the interposer makes on a
// kernel descriptor itself, goes through real() so that it never re-enters a wrapper.
// Filling the table is idempotent and needs no lock: racing threads store the same
// pointers.  The table is complete before the first wrapper runs its body (wrappers call
// real() first), and it is never changed afterwards (but for the direct marks beside it,
// files.h's), so signal handlers may use it.
#pragma once

#include <atomic>
#include <cstdint>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace vipl::db {

// X(name, return type, parameter list).  The busiest seven first: with the low fds' direct
// marks they fill the table's first cache line, all a kernel descriptor's call touches of it.
#define VIPL_DB_REAL_CALLS(X)                                                                      \
    X(read, ssize_t, (int, void *, size_t))                                                        \
    X(write, ssize_t, (int, const void *, size_t))                                                 \
    X(recv, ssize_t, (int, void *, size_t, int))                                                   \
    X(send, ssize_t, (int, const void *, size_t, int))                                             \
    X(epoll_wait, int, (int, epoll_event *, int, int))                                             \
    X(ppoll, int, (pollfd *, nfds_t, const timespec *, const sigset_t *))                          \
    X(poll, int, (pollfd *, nfds_t, int))                                                          \
    X(socket, int, (int, int, int))                                                                \
    X(socketpair, int, (int, int, int, int *))                                                     \
    X(bind, int, (int, const sockaddr *, socklen_t))                                               \
    X(listen, int, (int, int))                                                                     \
    X(accept, int, (int, sockaddr *, socklen_t *))                                                 \
    X(accept4, int, (int, sockaddr *, socklen_t *, int))                                           \
    X(connect, int, (int, const sockaddr *, socklen_t))                                            \
    X(close, int, (int))                                                                           \
    X(shutdown, int, (int, int))                                                                   \
    X(getsockopt, int, (int, int, int, void *, socklen_t *))                                       \
    X(setsockopt, int, (int, int, int, const void *, socklen_t))                                   \
    X(fcntl, int, (int, int, ...))                                                                 \
    X(ioctl, int, (int, unsigned long, ...))                                                       \
    X(dup, int, (int))                                                                             \
    X(dup2, int, (int, int))                                                                       \
    X(dup3, int, (int, int, int))                                                                  \
    X(readv, ssize_t, (int, const iovec *, int))                                                   \
    X(writev, ssize_t, (int, const iovec *, int))                                                  \
    X(recvfrom, ssize_t, (int, void *, size_t, int, sockaddr *, socklen_t *))                      \
    X(sendto, ssize_t, (int, const void *, size_t, int, const sockaddr *, socklen_t))              \
    X(recvmsg, ssize_t, (int, msghdr *, int))                                                      \
    X(sendmsg, ssize_t, (int, const msghdr *, int))                                                \
    X(sendfile, ssize_t, (int, int, off_t *, size_t))                                              \
    X(select, int, (int, fd_set *, fd_set *, fd_set *, timeval *))                                 \
    X(pselect, int, (int, fd_set *, fd_set *, fd_set *, const timespec *, const sigset_t *))       \
    X(epoll_create, int, (int))                                                                    \
    X(epoll_create1, int, (int))                                                                   \
    X(epoll_ctl, int, (int, int, int, epoll_event *))                                              \
    X(epoll_pwait, int, (int, epoll_event *, int, int, const sigset_t *))                          \
    X(epoll_pwait2, int, (int, epoll_event *, int, const timespec *, const sigset_t *))            \
    X(closefrom, void, (int))                                                                      \
    X(fork, pid_t, (void))                                                                         \
    X(execve, int, (const char *, char *const[], char *const[]))                                   \
    X(execv, int, (const char *, char *const[]))                                                   \
    X(execvp, int, (const char *, char *const[]))                                                  \
    X(execvpe, int, (const char *, char *const[], char *const[]))                                  \
    X(fexecve, int, (int, char *const[], char *const[]))                                           \
    X(execveat, int, (int, const char *, char *const[], char *const[], int))                       \
    X(sigaction, int, (int, const struct sigaction *, struct sigaction *))                         \
    X(signal, sighandler_t, (int, sighandler_t))                                                   \
    X(siginterrupt, int, (int, int))

struct alignas(64) RealCalls {
    // files.h's direct marks of fd numbers 0 to 63 (bit n: fd n), beside the busiest calls:
    // a data call on such a kernel descriptor touches this one line of ours, the mark and
    // the pointer it jumps through.  A set bit implies the table is filled (fd_mark_direct
    // fills it first), so such a call skips `ready`.
    std::atomic<uint64_t> direct_low{0};
#define VIPL_DB_REAL_FIELD(name, ret, params) ret(*name) params;
    VIPL_DB_REAL_CALLS(VIPL_DB_REAL_FIELD)
#undef VIPL_DB_REAL_FIELD
    bool ready = false; // filled (load_real_calls)
};
static_assert(sizeof(std::atomic<uint64_t>) + 7 * sizeof(void *) == 64,
              "the marks and the seven busiest calls fill the first line");

extern RealCalls g_real;

void load_real_calls() noexcept;

// The real calls, loaded on first use.
inline const RealCalls &real() noexcept {
    if (__builtin_expect(!__atomic_load_n(&g_real.ready, __ATOMIC_ACQUIRE), 0)) load_real_calls();
    return g_real;
}

} // namespace vipl::db
