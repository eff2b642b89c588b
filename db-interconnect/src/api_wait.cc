// The wrappers that wait: poll, ppoll, select, pselect and the epoll calls.
#include "api.h"

#include "config.h"
#include "poll_set.h"
#include "real.h"

#include <sys/epoll.h>
#include <sys/select.h>

using namespace vipl::db;

namespace {

void remaining(Deadline dl, timeval *tv) {
    auto left = dl - Clock::now();
    if (left < Clock::duration::zero()) left = Clock::duration::zero();
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(left).count();
    tv->tv_sec = us / 1000000;
    tv->tv_usec = us % 1000000;
}

// deadline: computed only for a set this library waits on itself (a set of kernel
// sockets only costs the program no clock read).
template <class DeadlineFn, class Kernel>
int wait_epoll(int epfd, epoll_event *ev, int max, DeadlineFn deadline, const sigset_t *mask,
               Kernel kernel) {
    // A set of the kernel's descriptors only (files.h's mark): nothing of ours to do.
    if (fd_direct(epfd) && !linger_any()) return kernel();
    if (passthrough()) return kernel();
    linger_reap();
    File *f = fd_peek(epfd);
    EpollSet *set = as_epoll(f);
    if (!set) {
        if (!f) fd_mark_direct(epfd, nullptr);
        return kernel();
    }
    if (!epoll_has_members(set) || epoll_all_direct(set)) {
        FileRef ref(fd_acquire(epfd));
        if (ref.get() == set) epoll_mark_direct(set, epfd);
        return kernel();
    }
    FileRef ref(fd_acquire(epfd));
    if (ref.get() != set) return kernel();
    Inside in;
    return guarded([&] { return epoll_wait_set(set, epfd, ev, max, deadline(), mask); }, -1);
}

} // namespace

extern "C" {

__attribute__((visibility("default"), hot)) int ppoll(pollfd *fds, nfds_t n, const timespec *ts,
                                                      const sigset_t *mask) {
    if (poll_all_direct(fds, n) && !linger_any()) return g_real.ppoll(fds, n, ts, mask);
    if (!passthrough()) linger_reap();
    if (passthrough() || !poll_has_tracked(fds, n)) return real().ppoll(fds, n, ts, mask);
    Inside in;
    return guarded([&] { return poll_tracked(fds, n, deadline_after(ts), mask); }, -1);
}

__attribute__((visibility("default"), hot)) int poll(pollfd *fds, nfds_t n, int ms) {
    if (poll_all_direct(fds, n) && !linger_any()) return g_real.poll(fds, n, ms);
    if (!passthrough()) linger_reap();
    if (passthrough() || !poll_has_tracked(fds, n)) return real().poll(fds, n, ms);
    Inside in;
    return guarded([&] { return poll_tracked(fds, n, deadline_after_ms(ms), nullptr); }, -1);
}

void __chk_fail(void) __attribute__((noreturn));

__attribute__((visibility("default"))) int __poll_chk(pollfd *fds, nfds_t n, int ms,
                                                      size_t fdslen) {
    if (fdslen / sizeof *fds < n) __chk_fail();
    return poll(fds, n, ms);
}

__attribute__((visibility("default"))) int __ppoll_chk(pollfd *fds, nfds_t n, const timespec *ts,
                                                       const sigset_t *mask, size_t fdslen) {
    if (fdslen / sizeof *fds < n) __chk_fail();
    return ppoll(fds, n, ts, mask);
}

__attribute__((visibility("default"))) int select(int nfds, fd_set *r, fd_set *w, fd_set *e,
                                                  timeval *tv) {
    if (!passthrough()) linger_reap();
    if (passthrough() || !select_has_tracked(nfds, r, w, e))
        return real().select(nfds, r, w, e, tv);
    Deadline dl = tv ? Clock::now() + std::chrono::seconds(tv->tv_sec) +
                           std::chrono::microseconds(tv->tv_usec)
                     : Deadline::max();
    Inside in;
    int k = guarded([&] { return select_tracked(nfds, r, w, e, dl, nullptr); }, -1);
    if (tv) remaining(dl, tv); // as Linux does
    return k;
}

__attribute__((visibility("default"))) int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e,
                                                   const timespec *ts, const sigset_t *mask) {
    if (!passthrough()) linger_reap();
    if (passthrough() || !select_has_tracked(nfds, r, w, e))
        return real().pselect(nfds, r, w, e, ts, mask);
    Inside in;
    return guarded([&] { return select_tracked(nfds, r, w, e, deadline_after(ts), mask); }, -1);
}

__attribute__((visibility("default"))) int epoll_create1(int flags) {
    int fd = real().epoll_create1(flags);
    if (fd < 0 || passthrough() || !config().enable) return fd;
    guarded(
        [&] {
            if (EpollSet *e = epoll_set_new()) replace_slot(fd, e);
            return 0;
        },
        0);
    return fd;
}

__attribute__((visibility("default"))) int epoll_create(int size) {
    if (size <= 0) {
        errno = EINVAL;
        return -1;
    }
    return epoll_create1(0);
}

__attribute__((visibility("default"))) int epoll_ctl(int epfd, int op, int fd, epoll_event *ev) {
    if (passthrough()) return real().epoll_ctl(epfd, op, fd, ev);
    EpollSet *set = as_epoll(fd_peek(epfd));
    Sock *s = as_sock(fd_peek(fd));
    if (!set || !s || epfd == fd) return real().epoll_ctl(epfd, op, fd, ev);
    if (op != EPOLL_CTL_DEL && !ev) {
        errno = EFAULT;
        return -1;
    }
    FileRef sref(fd_acquire(fd)), eref(fd_acquire(epfd));
    if (sref.get() != s || eref.get() != set) return real().epoll_ctl(epfd, op, fd, ev);
    bool member;
    {
        std::lock_guard<std::mutex> g(epoll_lock());
        member = set->by_fd.count(fd) != 0;
    }
    SockState st = s->state.load();
    if (!member && (st == SockState::plain || st == SockState::listening))
        return real().epoll_ctl(epfd, op, fd, ev);
    Inside in;
    return guarded([&] { return epoll_ctl_member(set, epfd, op, fd, s, ev); }, -1);
}

__attribute__((visibility("default"), hot)) int epoll_wait(int epfd, epoll_event *ev, int max,
                                                           int ms) {
    return wait_epoll(
        epfd, ev, max, [&] { return deadline_after_ms(ms); }, nullptr,
        [&] { return real().epoll_wait(epfd, ev, max, ms); });
}

__attribute__((visibility("default"))) int epoll_pwait(int epfd, epoll_event *ev, int max, int ms,
                                                       const sigset_t *mask) {
    return wait_epoll(
        epfd, ev, max, [&] { return deadline_after_ms(ms); }, mask,
        [&] { return real().epoll_pwait(epfd, ev, max, ms, mask); });
}

__attribute__((visibility("default"))) int epoll_pwait2(int epfd, epoll_event *ev, int max,
                                                        const timespec *ts, const sigset_t *mask) {
    return wait_epoll(
        epfd, ev, max, [&] { return deadline_after(ts); }, mask,
        [&] { return real().epoll_pwait2(epfd, ev, max, ts, mask); });
}

} // extern "C"
