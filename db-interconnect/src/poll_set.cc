#include "poll_set.h"

#include "files.h"
#include "negotiate.h"
#include "real.h"
#include "sock.h"
#include "thread_state.h"

#include "vipl/spin.h"

#include <algorithm>
#include <cerrno>
#include <vector>

namespace vipl::db {

namespace {

struct Entry {
    Sock *sock;
    nfds_t i;
    Under under;
    size_t x2 = 0; // where under.fd2 sits in the array polled (0: none)
};

thread_local std::vector<Entry> t_tracked VIPL_DB_TLS;
thread_local std::vector<pollfd> t_under VIPL_DB_TLS;

// An interposed socket whose readiness is not simply the kernel's.
Sock *tracked_sock(int fd) {
    if (fd_direct(fd)) return nullptr; // the kernel's for good (files.h)
    File *f = fd_peek(fd);
    if (!f || f->kind != File::Kind::sock) return nullptr;
    auto *s = static_cast<Sock *>(f);
    SockState st = s->state.load(std::memory_order_acquire);
    if (st == SockState::fresh || st == SockState::listening) return nullptr;
    if (st == SockState::plain && !has_prefix(s)) return nullptr;
    return s;
}

int kernel_ppoll(pollfd *fds, nfds_t n, Deadline dl, const sigset_t *mask) {
    timespec ts{};
    return real().ppoll(fds, n, time_left(dl, &ts), mask);
}

} // namespace

Deadline deadline_after(const timespec *ts) noexcept {
    if (!ts) return Deadline::max();
    // No time: Deadline{}, which passed() and time_left() answer without a clock read.
    if (ts->tv_sec < 0 || (ts->tv_sec == 0 && ts->tv_nsec == 0)) return Deadline{};
    if (ts->tv_sec > 100000000) return Deadline::max();
    return Clock::now() + std::chrono::seconds(ts->tv_sec) + std::chrono::nanoseconds(ts->tv_nsec);
}

Deadline deadline_after_ms(int ms) noexcept {
    if (ms < 0) return Deadline::max();
    if (ms == 0) return Deadline{};
    return Clock::now() + std::chrono::milliseconds(ms);
}

bool poll_has_tracked(const pollfd *fds, nfds_t n) noexcept {
    for (nfds_t i = 0; i < n; ++i)
        if (tracked_sock(fds[i].fd)) return true;
    return false;
}

int poll_tracked(pollfd *fds, nfds_t n, Deadline dl, const sigset_t *mask) noexcept {
    std::vector<Entry> &tracked = t_tracked;
    std::vector<pollfd> &under = t_under;
    tracked.clear();
    for (nfds_t i = 0; i < n; ++i) {
        Sock *s = tracked_sock(fds[i].fd);
        if (s && file_try_acquire(s)) tracked.push_back({s, i, {}, 0});
    }
    struct Release {
        std::vector<Entry> &t;
        ~Release() {
            for (Entry &e : t) file_release(e.sock);
            t.clear();
        }
    } release{tracked};

    for (;;) {
        under.assign(fds, fds + n);
        int ready = 0;
        bool streams = false;
        for (Entry &e : tracked) {
            pollfd &p = fds[e.i];
            // A wait's first look (sock_poll's `first`): the streams are armed before the
            // sleep.
            short r = sock_poll(e.sock, p.fd, p.events, 0, &e.under, false, true);
            p.revents = r;
            if (r) ++ready;
            under[e.i] = {e.under.fd, e.under.events, 0};
            e.x2 = 0;
            if (e.under.fd2 >= 0) {
                e.x2 = under.size();
                under.push_back({e.under.fd2, POLLIN, 0});
            }
            streams |= e.under.stream;
        }
        if (!ready && streams && !passed(dl)) {
            vipl::Spin spin;
            for (Entry &e : tracked)
                if (e.under.stream) spin.add(sock_spin_budget(e.sock));
            auto look = [&] {
                for (Entry &e : tracked) {
                    pollfd &p = fds[e.i];
                    if (!e.under.stream || p.revents) continue;
                    Under u;
                    p.revents = sock_poll(e.sock, p.fd, p.events, 0, &u);
                    if (p.revents) ++ready;
                }
                return ready > 0;
            };
            bool got = spin.run(look, dl);
            for (Entry &e : tracked) {
                SpinOf of{e.sock};
                if (e.under.stream) spin.report(of, got, fds[e.i].revents != 0);
            }
        }
        // One stream alone (a libpq program's poll of its connection): libvipl's own
        // sleep, a system call less per wake-up than arming and polling the wait fd.
        if (!ready && n == 1 && !mask && tracked.size() == 1 && tracked[0].under.stream &&
            tracked[0].under.fd2 < 0) {
            short r = 0;
            int k = sock_sleep(tracked[0].sock, fds[0].events, dl, &r);
            if (k != 2) {
                fds[0].revents = r;
                if (k == 1) return 1;
                if (k < 0) {
                    errno = EINTR;
                    return -1;
                }
                if (passed(dl)) return 0;
                continue; // woken: look again
            }
        }
        // About to sleep: each stream arms its wait fd (libvipl rings it at the next
        // event only then), which also tells what came since the last look.
        if (!ready && streams)
            for (Entry &e : tracked) {
                if (!e.under.stream) continue;
                pollfd &p = fds[e.i];
                p.revents = sock_arm(e.sock, p.fd, p.events);
                if (p.revents) ++ready;
            }
        // Nothing else to ask the kernel when every descriptor is a ready stream's.
        bool others = tracked.size() < n;
        for (Entry &e : tracked) others |= !e.under.stream || e.under.fd2 >= 0;
        if (ready && !others) return ready;
        // A connection still negotiating may be settled by another thread while we sleep
        // on its kernel connection (negotiate.h): sleep in slices then.
        bool sliced = false;
        for (Entry &e : tracked)
            sliced |= negotiating(e.sock->state.load(std::memory_order_acquire));
        Deadline until = ready ? Deadline{} : sliced ? negotiation_slice(dl) : dl;
        int k = kernel_ppoll(under.data(), under.size(), until, ready ? nullptr : mask);
        if (k < 0) return ready ? ready : -1;
        int count = 0;
        size_t t = 0;
        for (nfds_t i = 0; i < n; ++i) {
            if (t < tracked.size() && tracked[t].i == i) {
                Entry &e = tracked[t++];
                pollfd &p = fds[i];
                // Ready at the first look already, or asleep on something that fired:
                // the socket says what that means (a stream's event may be a spurious
                // one, a kernel connection's may finish a negotiation).
                bool second = e.x2 && under[e.x2].revents;
                if (!p.revents && (under[i].revents || second)) {
                    Under u;
                    p.revents = sock_poll(e.sock, p.fd, p.events,
                                          e.under.stream ? 0 : under[i].revents, &u);
                }
            } else {
                fds[i].revents = under[i].revents;
            }
            if (fds[i].revents) ++count;
        }
        if (count > 0 || (k == 0 && until == dl) || passed(dl)) return count;
    }
}

bool select_has_tracked(int nfds, const fd_set *r, const fd_set *w, const fd_set *e) noexcept {
    for (int fd = 0; fd < nfds && fd < FD_SETSIZE; ++fd) {
        if (!((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e)))) continue;
        if (tracked_sock(fd)) return true;
    }
    return false;
}

int select_tracked(int nfds, fd_set *r, fd_set *w, fd_set *e, Deadline dl,
                   const sigset_t *mask) noexcept {
    std::vector<pollfd> fds;
    nfds = std::min(nfds, FD_SETSIZE);
    for (int fd = 0; fd < nfds; ++fd) {
        short ev = 0;
        if (r && FD_ISSET(fd, r)) ev |= POLLIN;
        if (w && FD_ISSET(fd, w)) ev |= POLLOUT;
        if (e && FD_ISSET(fd, e)) ev |= POLLPRI;
        if (ev) fds.push_back({fd, ev, 0});
    }
    int k = poll_tracked(fds.data(), fds.size(), dl, mask);
    if (k < 0) return -1;
    for (const pollfd &p : fds)
        if (p.revents & POLLNVAL) {
            errno = EBADF;
            return -1;
        }
    if (r) FD_ZERO(r);
    if (w) FD_ZERO(w);
    if (e) FD_ZERO(e);
    int count = 0;
    for (const pollfd &p : fds) {
        if (r && (p.events & POLLIN) && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
            FD_SET(p.fd, r);
            ++count;
        }
        if (w && (p.events & POLLOUT) && (p.revents & (POLLOUT | POLLERR))) {
            FD_SET(p.fd, w);
            ++count;
        }
        if (e && (p.events & POLLPRI) && (p.revents & POLLPRI)) {
            FD_SET(p.fd, e);
            ++count;
        }
    }
    return count;
}

} // namespace vipl::db
