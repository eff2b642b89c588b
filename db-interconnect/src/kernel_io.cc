#include "kernel_io.h"

#include "real.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace vipl::db {

timespec *time_left(Deadline deadline, timespec *ts) noexcept {
    if (deadline == Deadline::max()) return nullptr;
    if (deadline == Deadline{}) { // no time at all: no clock read either
        *ts = {};
        return ts;
    }
    auto left = deadline - Clock::now();
    if (left < Clock::duration::zero()) left = Clock::duration::zero();
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    ts->tv_sec = ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
    return ts;
}

ssize_t kpeek(int fd, void *buf, size_t len) noexcept {
    for (;;) {
        ssize_t n = real().recv(fd, buf, len, MSG_PEEK | MSG_DONTWAIT);
        if (n >= 0 || errno != EINTR) return n;
    }
}

bool kdrop(int fd, size_t len) noexcept {
    uint8_t tmp[256];
    while (len > 0) {
        ssize_t n = real().recv(fd, tmp, std::min(len, sizeof tmp), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        len -= static_cast<size_t>(n);
    }
    return true;
}

int kwait(int fd, short events, Deadline deadline) noexcept {
    pollfd p{fd, events, 0};
    timespec ts{};
    timespec *tp = time_left(deadline, &ts);
    int r = real().ppoll(&p, 1, tp, nullptr);
    if (r < 0) return -1;
    return r == 0 ? 0 : p.revents;
}

int kwait2(int fd, int fd2, Deadline deadline) noexcept {
    pollfd p[2] = {{fd, POLLIN, 0}, {fd2, POLLIN, 0}};
    timespec ts{};
    timespec *tp = time_left(deadline, &ts);
    int r = real().ppoll(p, fd2 >= 0 ? 2 : 1, tp, nullptr);
    return r < 0 ? -1 : r > 0 ? 1 : 0;
}

bool ksend_all(int fd, const void *buf, size_t len, Deadline deadline, size_t *sent) noexcept {
    auto *p = static_cast<const uint8_t *>(buf);
    size_t done = 0;
    int saved = errno;
    bool ok = true;
    while (done < len) {
        ssize_t n = real().send(fd, p + done, len - done, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            done += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            int r = kwait(fd, POLLOUT, deadline);
            if (r == 0 || (r > 0 && (r & (POLLERR | POLLHUP)))) {
                ok = false;
                break;
            }
            continue;
        }
        ok = false;
        break;
    }
    if (sent) *sent = done;
    errno = saved;
    return ok;
}

bool same_host(int fd) noexcept {
    sockaddr_storage a{}, b{};
    socklen_t al = sizeof a, bl = sizeof b;
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&a), &al) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr *>(&b), &bl) != 0)
        return false;
    if (a.ss_family == AF_UNIX) return true;
    if (a.ss_family != b.ss_family) return false;
    if (a.ss_family == AF_INET)
        return reinterpret_cast<sockaddr_in &>(a).sin_addr.s_addr ==
               reinterpret_cast<sockaddr_in &>(b).sin_addr.s_addr;
    if (a.ss_family == AF_INET6)
        return std::memcmp(&reinterpret_cast<sockaddr_in6 &>(a).sin6_addr,
                           &reinterpret_cast<sockaddr_in6 &>(b).sin6_addr, 16) == 0;
    return false;
}

bool random_bytes(uint8_t *out, size_t len) noexcept {
    size_t done = 0;
    while (done < len) {
        ssize_t n = getrandom(out + done, len - done, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += static_cast<size_t>(n);
    }
    return true;
}

} // namespace vipl::db
