// The wrappers that make, connect, accept, configure, duplicate and close sockets.
#include "api.h"

#include "config.h"
#include "kernel_io.h"
#include "log.h"
#include "negotiate.h"
#include "real.h"
#include "stats.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdarg>
#include <cstring>

using namespace vipl::db;

namespace {

int timeval_ms(const void *v, socklen_t len) {
    if (!v || len < static_cast<socklen_t>(sizeof(timeval))) return 0;
    auto *tv = static_cast<const timeval *>(v);
    long long ms = static_cast<long long>(tv->tv_sec) * 1000 + (tv->tv_usec + 999) / 1000;
    return ms > 0x7fffffff ? 0x7fffffff : static_cast<int>(ms < 0 ? 0 : ms);
}

// The socket's SO_RCVTIMEO/SO_SNDTIMEO as the kernel has them (an accepted socket
// inherits its listener's).
void read_timeouts(Sock *s, int fd) {
    timeval tv{};
    socklen_t l = sizeof tv;
    if (real().getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l) == 0)
        s->rcv_timeout_ms = timeval_ms(&tv, l);
    l = sizeof tv;
    if (real().getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l) == 0)
        s->snd_timeout_ms = timeval_ms(&tv, l);
}

bool stream_family(int domain) {
    return domain == AF_UNIX || domain == AF_INET || domain == AF_INET6;
}

void track_new_socket(int fd, int domain, int type) {
    Sock *s = sock_new(SockState::fresh, domain);
    if (!s) return;
    s->nonblock = (type & SOCK_NONBLOCK) != 0;
    replace_slot(fd, s);
}

// A socket accepted on an interposed listener starts undecided.
void track_accepted(Sock *l, int fd, int flags) {
    Sock *s = sock_new(SockState::undecided, l->family);
    if (!s) return;
    Inside in;
    s->nonblock = (flags & SOCK_NONBLOCK) != 0;
    read_timeouts(s, fd);
    s->stat = stat_open(fd, true, fd);
    replace_slot(fd, s);
}

// A non-blocking connect the program learned has finished (connect again, SO_ERROR):
// the client's first step comes now, unless another thread's call already took it.
void connect_finished(Sock *s, int fd) {
    guarded(
        [&] {
            std::lock_guard<std::mutex> g(s->mu);
            Inside in;
            if (s->state.load() == SockState::connecting) client_connected(s, fd);
            return 0;
        },
        0);
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) int socket(int domain, int type, int protocol) {
    int fd = real().socket(domain, type, protocol);
    if (fd < 0 || passthrough() || !config().enable) return fd;
    if (stream_family(domain) && (type & 0xff) == SOCK_STREAM &&
        (protocol == 0 || (domain != AF_UNIX && protocol == IPPROTO_TCP)))
        guarded(
            [&] {
                track_new_socket(fd, domain, type);
                return 0;
            },
            0);
    return fd;
}

__attribute__((visibility("default"))) int listen(int fd, int backlog) {
    int r = real().listen(fd, backlog);
    Sock *s = tracked(fd);
    if (r != 0 || !s) return r;
    guarded(
        [&] {
            std::lock_guard<std::mutex> g(s->mu);
            Inside in;
            if (s->state.load() != SockState::fresh) return 0;
            sockaddr_storage ss{};
            socklen_t sl = sizeof ss;
            getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &sl);
            if (!config().listen.match(reinterpret_cast<sockaddr *>(&ss), sl)) {
                s->state.store(SockState::plain);
                return 0;
            }
            s->state.store(SockState::listening);
            sock_listening(s, fd);
            return 0;
        },
        0);
    return r;
}

__attribute__((visibility("default"))) int accept4(int fd, sockaddr *addr, socklen_t *len,
                                                   int flags) {
    int c = real().accept4(fd, addr, len, flags);
    if (c < 0) return c;
    Sock *l = tracked(fd);
    if (l && l->state.load() == SockState::listening) {
        int saved = errno;
        guarded(
            [&] {
                track_accepted(l, c, flags);
                return 0;
            },
            0);
        errno = saved;
    }
    return c;
}

__attribute__((visibility("default"))) int accept(int fd, sockaddr *addr, socklen_t *len) {
    return accept4(fd, addr, len, 0);
}

__attribute__((visibility("default"))) int connect(int fd, const sockaddr *addr, socklen_t len) {
    Sock *s = tracked(fd);
    if (!s || !addr || len < static_cast<socklen_t>(sizeof(sa_family_t)))
        return real().connect(fd, addr, len);
    SockState st = s->state.load();
    if (st == SockState::connecting) {
        // A program that calls connect again to learn how its first one ended.
        int r = real().connect(fd, addr, len);
        if (r == 0 || errno == EISCONN) {
            int saved = errno;
            connect_finished(s, fd);
            errno = saved;
        }
        return r;
    }
    if (st != SockState::fresh) return real().connect(fd, addr, len);
    return guarded(
        [&]() -> int {
            const Config &c = config();
            bool local = c.connect.match(addr, len);
            bool remote = addr->sa_family != AF_UNIX && c.remote.match(addr, len);
            if (!local && !remote) {
                int r = real().connect(fd, addr, len);
                int saved = errno;
                Inside in;
                sock_untrack(s, fd);
                errno = saved;
                return r;
            }
            {
                std::lock_guard<std::mutex> g(s->mu);
                s->remote_rule = remote;
                s->dest_len = std::min<socklen_t>(len, sizeof s->dest);
                std::memcpy(&s->dest, addr, s->dest_len);
            }
            int r = real().connect(fd, addr, len);
            int saved = errno;
            std::lock_guard<std::mutex> g(s->mu);
            Inside in;
            if (r == 0 || saved == EINPROGRESS) {
                // Done or under way, the connection is the client's: its timeouts and
                // statistics are taken now, its first step once the kernel's connect ends.
                read_timeouts(s, fd);
                s->stat = stat_open(fd, false, fd);
                if (r == 0) {
                    client_connected(s, fd);
                } else {
                    s->state.store(SockState::connecting);
                    epoll_sock_changed(s);
                }
            }
            errno = saved;
            return r;
        },
        -1);
}

__attribute__((visibility("default"))) int close(int fd) {
    if (passthrough()) return real().close(fd);
    File *f = fd_peek(fd);
    if (!f) return real().close(fd);
    File *old = fd_remove(fd);
    int r = real().close(fd);
    int saved = errno;
    linger_reap();
    if (old)
        guarded(
            [&] {
                file_release(old);
                return 0;
            },
            0);
    errno = saved;
    return r;
}

__attribute__((visibility("default"))) int shutdown(int fd, int how) {
    Sock *s = tracked(fd);
    if (!s) return real().shutdown(fd, how);
    FileRef ref(fd_acquire(fd));
    if (ref.get() != s) return real().shutdown(fd, how);
    Inside in;
    int r = guarded([&] { return sock_shutdown(s, fd, how); }, -1);
    return r == static_cast<int>(kKernel) ? real().shutdown(fd, how) : r;
}

__attribute__((visibility("default"))) int getsockopt(int fd, int level, int name, void *val,
                                                      socklen_t *len) {
    int r = real().getsockopt(fd, level, name, val, len);
    Sock *s = tracked(fd);
    if (r != 0 || !s || level != SOL_SOCKET || name != SO_ERROR || !val ||
        s->state.load() != SockState::connecting)
        return r;
    // The program learns that its connect finished: the client's first step comes now.
    if (*static_cast<int *>(val) == 0) {
        pollfd p{fd, POLLOUT, 0};
        if (real().poll(&p, 1, 0) == 1 && !(p.revents & (POLLERR | POLLHUP)))
            connect_finished(s, fd);
    } else {
        std::lock_guard<std::mutex> g(s->mu);
        s->state.store(SockState::plain);
    }
    return r;
}

__attribute__((visibility("default"))) int setsockopt(int fd, int level, int name, const void *val,
                                                      socklen_t len) {
    int r = real().setsockopt(fd, level, name, val, len);
    Sock *s = tracked(fd);
    if (r == 0 && s && level == SOL_SOCKET) {
        if (name == SO_RCVTIMEO) s->rcv_timeout_ms = timeval_ms(val, len);
        if (name == SO_SNDTIMEO) s->snd_timeout_ms = timeval_ms(val, len);
    }
    return r;
}

__attribute__((visibility("default"))) int fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    int r = real().fcntl(fd, cmd, arg);
    if (r < 0 || passthrough()) return r;
    File *f = fd_peek(fd);
    if (!f) return r;
    if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
        FileRef ref(fd_acquire(fd));
        if (ref) replace_slot(r, ref.get());
    } else if (cmd == F_SETFL) {
        if (Sock *s = as_sock(f))
            s->nonblock = (static_cast<int>(reinterpret_cast<intptr_t>(arg)) & O_NONBLOCK) != 0;
    }
    return r;
}

__attribute__((visibility("default"))) int fcntl64(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl(fd, cmd, arg);
}

__attribute__((visibility("default"))) int ioctl(int fd, unsigned long req, ...) {
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    Sock *s = tracked(fd);
    if (s && req == FIONREAD && arg) {
        FileRef ref(fd_acquire(fd));
        if (ref.get() == s) {
            Inside in;
            int n = guarded([&] { return sock_readable_bytes(s); }, -1);
            if (n >= 0) {
                *static_cast<int *>(arg) = n;
                return 0;
            }
        }
    }
    int r = real().ioctl(fd, req, arg);
    if (r == 0 && s && req == FIONBIO && arg) s->nonblock = *static_cast<int *>(arg) != 0;
    return r;
}

__attribute__((visibility("default"))) int dup(int fd) {
    int r = real().dup(fd);
    if (r < 0 || passthrough()) return r;
    FileRef ref(fd_acquire(fd));
    if (ref) replace_slot(r, ref.get());
    return r;
}

static int dup_to(int r, int oldfd, int newfd) {
    if (r < 0 || passthrough() || oldfd == newfd) return r;
    int saved = errno;
    FileRef ref(fd_acquire(oldfd));
    guarded(
        [&] {
            replace_slot(newfd, ref.get());
            return 0;
        },
        0);
    errno = saved;
    return r;
}

__attribute__((visibility("default"))) int dup2(int oldfd, int newfd) {
    return dup_to(real().dup2(oldfd, newfd), oldfd, newfd);
}

__attribute__((visibility("default"))) int dup3(int oldfd, int newfd, int flags) {
    return dup_to(real().dup3(oldfd, newfd, flags), oldfd, newfd);
}

// The descriptors first..last were closed behind the table's back (close_range, the C
// library's closefrom): their slots go, and interposed sockets with them.
static void forget_closed(unsigned first, unsigned last) {
    int high = fd_highest();
    if (high < 0) return;
    unsigned end = last < static_cast<unsigned>(high) ? last : static_cast<unsigned>(high);
    for (unsigned fd = first; fd <= end; ++fd)
        if (fd_peek(static_cast<int>(fd)))
            guarded(
                [&] {
                    replace_slot(static_cast<int>(fd), nullptr);
                    return 0;
                },
                0);
}

__attribute__((visibility("default"))) int close_range(unsigned first, unsigned last, int flags) {
    int r = static_cast<int>(syscall(SYS_close_range, first, last, flags));
    if (r != 0 || (flags & CLOSE_RANGE_CLOEXEC) || passthrough()) return r;
    forget_closed(first, last);
    return r;
}

__attribute__((visibility("default"))) void closefrom(int low) {
    unsigned first = static_cast<unsigned>(low < 0 ? 0 : low);
    int saved = errno;
    // A kernel before 5.9 has no close_range: the C library's closefrom knows what to do
    // there (it walks /proc/self/fd).
    if (close_range(first, ~0u, 0) != 0 && errno == ENOSYS && real().closefrom) {
        real().closefrom(low);
        if (!passthrough()) forget_closed(first, ~0u);
    }
    errno = saved;
}

} // extern "C"
