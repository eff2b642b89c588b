// The wrappers that move bytes: read/write and the recv/send family, sendfile, and the
// _FORTIFY_SOURCE variants glibc's headers turn some of them into.
#include "api.h"

#include "real.h"
#include "stats.h"

#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

using namespace vipl::db;

namespace {

// Whether calls on this socket may go straight to the kernel without looking further.
inline bool kernel_only(Sock *s) {
    SockState st = s->state.load(std::memory_order_acquire);
    if (st == SockState::plain) return !has_prefix(s) && s->pre_bytes == 0;
    return st == SockState::fresh || st == SockState::listening;
}

// The sender a connected stream's recvfrom/recvmsg names, as the kernel's would: a unix
// connection names the peer's address (the listener's path, for a client), TCP none.
void name_sender(int fd, sockaddr *from, socklen_t *len) {
    Sock *s = tracked(fd);
    if (!s || s->state.load() != SockState::vipl) return;
    // An unbound peer (a client's end, usually) has no address: length 0, not a family.
    if (s->family != AF_UNIX || getpeername(fd, from, len) != 0 ||
        *len <= static_cast<socklen_t>(sizeof(sa_family_t)))
        *len = 0;
}

using SockIo = ssize_t (*)(Sock *, int, const iovec *, int, int) noexcept;

// A read or write on fd: through the socket's stream (io: sock_recv or sock_send) while
// the socket is interposed and still the one in the slot, else the kernel's call.
template <SockIo io, class Kernel>
ssize_t through(int fd, const iovec *iov, int n, int flags, Kernel kernel) {
    if (fd_direct(fd) || passthrough()) return kernel();
    File *f = fd_peek(fd);
    Sock *s = as_sock(f);
    if (!s) {
        // Nothing of ours here (a file, a pipe, a socket not interposed): its later calls
        // skip the table until the slot changes.
        if (!f) fd_mark_direct(fd, nullptr);
        return kernel();
    }
    if (kernel_only(s)) {
        // A plain socket stays plain: its later calls skip the table (files.h).
        if (s->state.load(std::memory_order_acquire) == SockState::plain) {
            FileRef ref(fd_acquire(fd));
            if (ref.get() == s && kernel_only(s)) fd_mark_direct(fd, s);
        }
        return kernel();
    }
    FileRef ref(fd_acquire(fd));
    if (ref.get() != s) return kernel();
    ssize_t r;
    {
        Inside inside;
        r = guarded([&] { return io(s, fd, iov, n, flags); }, ssize_t{-1});
    }
    return r == kKernel ? kernel() : r;
}

template <class Kernel>
ssize_t in(int fd, const iovec *iov, int n, int flags, Kernel kernel) {
    return through<sock_recv>(fd, iov, n, flags, kernel);
}

template <class Kernel>
ssize_t out(int fd, const iovec *iov, int n, int flags, Kernel kernel) {
    return through<sock_send>(fd, iov, n, flags, kernel);
}

// The busiest wrappers look at fd_direct's mark first and go straight to the kernel for its
// descriptors (one load, a tail call, no frame); the rest is out of line.  They and the
// waits' (api_wait.cc) are `hot`: grouped in .text.hot, a kernel descriptor's calls touch
// one page of our code, one TLB entry in every process.
__attribute__((noinline)) ssize_t read_slow(int fd, void *buf, size_t len) {
    iovec v{buf, len};
    return in(fd, &v, 1, 0, [&] { return real().read(fd, buf, len); });
}

__attribute__((noinline)) ssize_t write_slow(int fd, const void *buf, size_t len) {
    iovec v{const_cast<void *>(buf), len};
    return out(fd, &v, 1, 0, [&] { return real().write(fd, buf, len); });
}

__attribute__((noinline)) ssize_t recv_slow(int fd, void *buf, size_t len, int flags) {
    iovec v{buf, len};
    return in(fd, &v, 1, flags, [&] { return real().recv(fd, buf, len, flags); });
}

__attribute__((noinline)) ssize_t send_slow(int fd, const void *buf, size_t len, int flags) {
    iovec v{const_cast<void *>(buf), len};
    return out(fd, &v, 1, flags, [&] { return real().send(fd, buf, len, flags); });
}

} // namespace

extern "C" {

__attribute__((visibility("default"), hot)) ssize_t read(int fd, void *buf, size_t len) {
    if (__builtin_expect(fd_direct(fd), 1)) return g_real.read(fd, buf, len);
    return read_slow(fd, buf, len);
}

__attribute__((visibility("default"), hot)) ssize_t write(int fd, const void *buf, size_t len) {
    if (__builtin_expect(fd_direct(fd), 1)) return g_real.write(fd, buf, len);
    return write_slow(fd, buf, len);
}

__attribute__((visibility("default"))) ssize_t readv(int fd, const iovec *iov, int n) {
    return in(fd, iov, n, 0, [&] { return real().readv(fd, iov, n); });
}

__attribute__((visibility("default"))) ssize_t writev(int fd, const iovec *iov, int n) {
    return out(fd, iov, n, 0, [&] { return real().writev(fd, iov, n); });
}

__attribute__((visibility("default"), hot)) ssize_t recv(int fd, void *buf, size_t len, int flags) {
    if (__builtin_expect(fd_direct(fd), 1)) return g_real.recv(fd, buf, len, flags);
    return recv_slow(fd, buf, len, flags);
}

__attribute__((visibility("default"), hot)) ssize_t send(int fd, const void *buf, size_t len,
                                                         int flags) {
    if (__builtin_expect(fd_direct(fd), 1)) return g_real.send(fd, buf, len, flags);
    return send_slow(fd, buf, len, flags);
}

__attribute__((visibility("default"))) ssize_t recvfrom(int fd, void *buf, size_t len, int flags,
                                                        sockaddr *from, socklen_t *fromlen) {
    iovec v{buf, len};
    ssize_t r =
        in(fd, &v, 1, flags, [&] { return real().recvfrom(fd, buf, len, flags, from, fromlen); });
    if (r >= 0 && from && fromlen) name_sender(fd, from, fromlen);
    return r;
}

__attribute__((visibility("default"))) ssize_t
sendto(int fd, const void *buf, size_t len, int flags, const sockaddr *to, socklen_t tolen) {
    iovec v{const_cast<void *>(buf), len};
    return out(fd, &v, 1, flags, [&] { return real().sendto(fd, buf, len, flags, to, tolen); });
}

__attribute__((visibility("default"))) ssize_t recvmsg(int fd, msghdr *msg, int flags) {
    if (!msg) return real().recvmsg(fd, msg, flags);
    ssize_t r = in(fd, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags,
                   [&] { return real().recvmsg(fd, msg, flags); });
    Sock *s = tracked(fd);
    if (r >= 0 && s && s->state.load() == SockState::vipl) {
        if (msg->msg_name)
            name_sender(fd, static_cast<sockaddr *>(msg->msg_name), &msg->msg_namelen);
        else
            msg->msg_namelen = 0;
        msg->msg_controllen = 0;
        msg->msg_flags = 0;
    }
    return r;
}

__attribute__((visibility("default"))) ssize_t sendmsg(int fd, const msghdr *msg, int flags) {
    if (!msg) return real().sendmsg(fd, msg, flags);
    Sock *s = tracked(fd);
    if (s && msg->msg_controllen > 0 && s->state.load() == SockState::vipl) {
        // Descriptors and credentials travel only on the kernel connection, which no
        // longer carries the stream's bytes: refuse rather than reorder them.
        errno = EOPNOTSUPP;
        return -1;
    }
    return out(fd, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags,
               [&] { return real().sendmsg(fd, msg, flags); });
}

__attribute__((visibility("default"))) ssize_t sendfile(int out_fd, int in_fd, off_t *offset,
                                                        size_t count) {
    Sock *s = tracked(out_fd);
    if (!s || s->state.load() != SockState::vipl)
        return real().sendfile(out_fd, in_fd, offset, count);
    // Through a buffer of ours: the stream has no kernel path from a file.
    return guarded(
        [&]() -> ssize_t {
            std::vector<char> buf(std::min<size_t>(count, 256 * 1024));
            size_t done = 0;
            off_t pos = offset ? *offset : 0;
            while (done < count) {
                size_t want = std::min(buf.size(), count - done);
                ssize_t n = offset ? pread(in_fd, buf.data(), want, pos)
                                   : real().read(in_fd, buf.data(), want);
                if (n < 0) {
                    if (done) break;
                    return -1;
                }
                if (n == 0) break;
                ssize_t w = send(out_fd, buf.data(), static_cast<size_t>(n), 0);
                if (w < 0) {
                    if (done) break;
                    return -1;
                }
                done += static_cast<size_t>(w);
                pos += w;
                if (!offset && w < n) lseek(in_fd, w - n, SEEK_CUR);
                if (w < n) break;
            }
            if (offset) *offset = pos;
            return static_cast<ssize_t>(done);
        },
        ssize_t{-1});
}

__attribute__((visibility("default"))) ssize_t sendfile64(int out_fd, int in_fd, off_t *offset,
                                                          size_t count) {
    return sendfile(out_fd, in_fd, offset, count);
}

// _FORTIFY_SOURCE: the buffer's size is known; the check is glibc's own.
void __chk_fail(void) __attribute__((noreturn));

__attribute__((visibility("default"))) ssize_t __read_chk(int fd, void *buf, size_t len,
                                                          size_t buflen) {
    if (len > buflen) __chk_fail();
    return read(fd, buf, len);
}

__attribute__((visibility("default"))) ssize_t __recv_chk(int fd, void *buf, size_t len,
                                                          size_t buflen, int flags) {
    if (len > buflen) __chk_fail();
    return recv(fd, buf, len, flags);
}

__attribute__((visibility("default"))) ssize_t __recvfrom_chk(int fd, void *buf, size_t len,
                                                              size_t buflen, int flags,
                                                              sockaddr *from, socklen_t *fromlen) {
    if (len > buflen) __chk_fail();
    return recvfrom(fd, buf, len, flags, from, fromlen);
}

} // extern "C"
