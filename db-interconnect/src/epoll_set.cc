#include "epoll_set.h"

#include "kernel_io.h"
#include "real.h"
#include "sock.h"
#include "thread_state.h"

#include "vipl/spin.h"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace vipl::db {

namespace {

std::mutex g_lock;
std::vector<EpollSet *> g_pool; // reused, never freed (files.h)

constexpr uint32_t kEventBits = EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDHUP;
constexpr uint64_t kTagBit = uint64_t{1} << 63;

uint64_t tag_key() {
    static const uint64_t key = [] {
        uint64_t k = 0;
        random_bytes(reinterpret_cast<uint8_t *>(&k), sizeof k);
        return k | kTagBit;
    }();
    return key;
}

short want_of(const Member *m) {
    return static_cast<short>(m->app.events & kEventBits);
}

bool set_usable(EpollSet *set) {
    return set->last_fd >= 0 && fd_peek(set->last_fd) == set;
}

void unregister2(Member *m, int epfd) {
    if (m->own_fd2 >= 0) {
        if (epfd >= 0) real().epoll_ctl(epfd, EPOLL_CTL_DEL, m->own_fd2, nullptr);
        real().close(m->own_fd2);
    }
    m->own_fd2 = m->watched2 = -1;
}

void unregister(Member *m, int epfd) {
    if (m->under_fd >= 0 && epfd >= 0) real().epoll_ctl(epfd, EPOLL_CTL_DEL, m->under_fd, nullptr);
    if (m->own_fd >= 0) real().close(m->own_fd);
    m->under_fd = m->own_fd = -1;
    m->under_events = 0;
    m->under_stream = false;
    unregister2(m, epfd);
}

// The second registration (a rendezvous's listener while the socket accepts).
void sync2(Member *m, int epfd, int want_fd) {
    if (want_fd == m->watched2) return;
    unregister2(m, epfd);
    if (want_fd < 0) return;
    m->own_fd2 = real().fcntl(want_fd, F_DUPFD_CLOEXEC, 0);
    if (m->own_fd2 < 0) return;
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = m->tag ^ 2;
    if (real().epoll_ctl(epfd, EPOLL_CTL_ADD, m->own_fd2, &e) != 0) {
        real().close(m->own_fd2);
        m->own_fd2 = -1;
        return;
    }
    m->watched2 = want_fd;
}

// A connection settled on the kernel for good: plain, with nothing of ours to give
// before the kernel's bytes.  Nothing about it needs us any more.
bool settled(const Sock *s) {
    return s->state.load(std::memory_order_acquire) == SockState::plain && !has_prefix(s) &&
           s->pre_bytes == 0;
}

// A settled member is registered as the program asked (its events, its data): the
// kernel's report of it is the program's, and a set of only such members is waited on
// by the kernel alone (a PostgreSQL backend whose client is plain pays nothing).
int sync_direct(Member *m, int epfd, bool force) {
    m->dirty = false;
    epoll_event e = m->app;
    if (m->direct) {
        if (!force) return 0;
        return real().epoll_ctl(epfd, EPOLL_CTL_MOD, m->fd, &e);
    }
    unregister(m, epfd);
    if (real().epoll_ctl(epfd, EPOLL_CTL_ADD, m->fd, &e) != 0) return -1;
    m->under_fd = m->fd;
    m->under_events = e.events;
    m->direct = true;
    m->set->ndirect.fetch_add(1, std::memory_order_relaxed);
    return 0;
}

// Registers in the kernel set what the member's socket needs now (g_lock held).
int sync(Member *m, int epfd, bool force) {
    if (m->direct || settled(m->sock)) return sync_direct(m, epfd, force);
    if (force) m->edge_fresh = true;
    Under u = sock_under(m->sock, m->fd, want_of(m));
    sync2(m, epfd, u.fd2);
    uint32_t ev =
        (static_cast<uint16_t>(u.events) & kEventBits) | (m->app.events & (EPOLLET | EPOLLONESHOT));
    if (u.stream) ev |= EPOLLET; // see the header
    int target = u.fd;
    int now = m->own_fd >= 0 ? -2 : m->under_fd; // a duplicate stands for the stream's fd
    bool same = (now == target || (m->own_fd >= 0 && u.stream)) && ev == m->under_events;
    m->dirty = false;
    if (same && !force) return 0;
    epoll_event e{};
    e.events = ev;
    e.data.u64 = m->tag;
    if (m->under_fd >= 0 && (now == target || m->own_fd >= 0) &&
        real().epoll_ctl(epfd, EPOLL_CTL_MOD, m->under_fd, &e) == 0) {
        m->under_events = ev;
        m->under_stream = u.stream;
        return 0;
    }
    unregister(m, epfd);
    if (target < 0) return 0;
    int r = real().epoll_ctl(epfd, EPOLL_CTL_ADD, target, &e);
    if (r != 0 && errno == EEXIST && u.stream) {
        // The set holds this stream already (two descriptors of one socket): a duplicate
        // of its descriptor is a second registration.
        m->own_fd = real().fcntl(target, F_DUPFD_CLOEXEC, 0);
        if (m->own_fd >= 0) {
            r = real().epoll_ctl(epfd, EPOLL_CTL_ADD, m->own_fd, &e);
            target = m->own_fd;
        }
    }
    if (r != 0) return -1;
    m->under_fd = target;
    m->under_events = ev;
    m->under_stream = u.stream;
    return 0;
}

void drop(Member *m) {
    EpollSet *set = m->set;
    set->nmembers.fetch_sub(1, std::memory_order_relaxed);
    if (m->direct) set->ndirect.fetch_sub(1, std::memory_order_relaxed);
    set->by_fd.erase(m->fd);
    set->by_tag.erase(m->tag);
    set->by_tag.erase(m->tag ^ 2);
    auto &v = m->sock->members;
    v.erase(std::remove(v.begin(), v.end(), m), v.end());
    delete m;
}

// Edge-triggered members: what of r is an edge (not reported since the program last met
// EAGAIN on it, or more arrived since); records r.  g_lock held; m still a member.
short edge_filter(Member *m, short r, uint64_t arrived) {
    short fresh = static_cast<short>(r & ~m->edge_bits);
    if (arrived != m->edge_seen) fresh |= static_cast<short>(r & POLLIN);
    m->edge_bits = r;
    m->edge_seen = arrived;
    return fresh ? r : 0;
}

struct Snap {
    Sock *sock;
    int fd;
    short want;
    epoll_data_t data;
    Member *m;
    bool oneshot;
    bool edge = false;
    bool look = true;         // looked at before sleeping (else only armed)
    bool kernel_edge = false; // its kernel registration is the stream's, EPOLLET
};

thread_local std::vector<Snap> t_snap VIPL_DB_TLS;
thread_local std::vector<bool> t_hit VIPL_DB_TLS;
thread_local std::vector<Member *> t_seen VIPL_DB_TLS;

} // namespace

std::mutex &epoll_lock() {
    return g_lock;
}

EpollSet *epoll_set_new() noexcept {
    {
        std::lock_guard<std::mutex> g(g_lock);
        if (!g_pool.empty()) {
            EpollSet *e = g_pool.back();
            g_pool.pop_back();
            return e;
        }
    }
    return new (std::nothrow) EpollSet;
}

void epoll_set_destroy(EpollSet *set) noexcept {
    std::lock_guard<std::mutex> g(g_lock);
    Inside in;
    std::vector<Member *> all;
    for (auto &[fd, m] : set->by_fd) all.push_back(m);
    for (Member *m : all) {
        if (m->own_fd >= 0) real().close(m->own_fd);
        if (m->own_fd2 >= 0) real().close(m->own_fd2);
        m->own_fd = m->own_fd2 = -1;
        drop(m);
    }
    set->by_fd.clear();
    set->by_tag.clear();
    set->stale.clear();
    set->last_fd = -1;
    g_pool.push_back(set);
}

bool epoll_has_members(EpollSet *set) noexcept {
    return set->nmembers.load(std::memory_order_relaxed) > 0;
}

void epoll_mark_direct(EpollSet *set, int epfd) noexcept {
    int marked = set->marked_fd.load(std::memory_order_seq_cst);
    if (marked != -1 && marked != epfd) return;
    set->marked_fd.store(epfd, std::memory_order_seq_cst);
    fd_mark_direct(epfd, set);
    if (set->ndirect.load(std::memory_order_seq_cst) !=
        set->nmembers.load(std::memory_order_seq_cst))
        fd_clear_direct(epfd);
}

bool epoll_all_direct(EpollSet *set) noexcept {
    return set->ndirect.load(std::memory_order_relaxed) ==
           set->nmembers.load(std::memory_order_relaxed);
}

void epoll_sock_changed(Sock *s) noexcept {
    std::lock_guard<std::mutex> g(g_lock);
    Inside in;
    for (Member *m : s->members) {
        m->dirty = true;
        // A thread may be asleep on the set right now: what it watches must follow at
        // once (the kernel takes a registration made during a wait).
        if (set_usable(m->set)) sync(m, m->set->last_fd, false);
    }
}

void epoll_sock_drained(Sock *s, short bits) noexcept {
    std::lock_guard<std::mutex> g(g_lock);
    for (Member *m : s->members)
        if (m->app.events & EPOLLET) m->edge_bits = static_cast<short>(m->edge_bits & ~bits);
}

void epoll_sock_gone(Sock *s) noexcept {
    std::lock_guard<std::mutex> g(g_lock);
    Inside in;
    std::vector<Member *> all = s->members;
    for (Member *m : all) {
        // The program closed the socket: its number may name another file by now, so a
        // registration of the kernel connection is left to the kernel (it goes with the
        // file); the stream's descriptor is ours and still open.
        if (m->under_fd >= 0 && m->under_fd != m->fd && set_usable(m->set))
            real().epoll_ctl(m->set->last_fd, EPOLL_CTL_DEL, m->under_fd, nullptr);
        else if (m->under_fd == m->fd && m->set->stale.size() < 4096)
            m->set->stale.insert(m->tag);
        if (m->own_fd >= 0) real().close(m->own_fd);
        m->own_fd = -1;
        unregister2(m, set_usable(m->set) ? m->set->last_fd : -1);
        drop(m);
    }
    s->members.clear();
}

void epoll_sock_untrack(Sock *s) noexcept {
    std::lock_guard<std::mutex> g(g_lock);
    Inside in;
    std::vector<Member *> all = s->members;
    for (Member *m : all) {
        if (set_usable(m->set)) {
            int epfd = m->set->last_fd;
            epoll_event e = m->app;
            if (m->under_fd == m->fd) {
                real().epoll_ctl(epfd, EPOLL_CTL_MOD, m->fd, &e);
            } else {
                unregister(m, epfd);
                real().epoll_ctl(epfd, EPOLL_CTL_ADD, m->fd, &e);
            }
        }
        if (m->own_fd >= 0) real().close(m->own_fd);
        m->own_fd = -1;
        drop(m);
    }
    s->members.clear();
}

int epoll_ctl_member(EpollSet *set, int epfd, int op, int fd, Sock *s, epoll_event *ev) noexcept {
    std::lock_guard<std::mutex> g(g_lock);
    Inside in;
    set->last_fd = epfd;
    auto it = set->by_fd.find(fd);
    if (op == EPOLL_CTL_ADD) {
        if (it != set->by_fd.end()) {
            errno = EEXIST;
            return -1;
        }
        auto *m = new (std::nothrow) Member;
        if (!m) {
            errno = ENOMEM;
            return -1;
        }
        m->set = set;
        m->sock = s;
        m->fd = fd;
        m->app = *ev;
        m->tag = reinterpret_cast<uint64_t>(m) ^ tag_key();
        set->stale.erase(m->tag);
        set->stale.erase(m->tag ^ 2);
        if (sync(m, epfd, true) != 0) {
            int err = errno;
            delete m;
            errno = err;
            return -1;
        }
        set->by_fd[fd] = m;
        set->by_tag[m->tag] = m;
        set->by_tag[m->tag ^ 2] = m;
        // Counted, then the mark cleared: a marker that missed the count finds its mark
        // gone, one that saw it takes its mark back (epoll_mark_direct).
        set->nmembers.fetch_add(1, std::memory_order_seq_cst);
        int marked = set->marked_fd.load(std::memory_order_seq_cst);
        if (marked >= 0) fd_clear_direct(marked);
        s->members.push_back(m);
        return 0;
    }
    if (it == set->by_fd.end()) {
        errno = ENOENT;
        return -1;
    }
    Member *m = it->second;
    if (op == EPOLL_CTL_DEL) {
        unregister(m, epfd);
        drop(m);
        return 0;
    }
    if (op != EPOLL_CTL_MOD) {
        errno = EINVAL;
        return -1;
    }
    m->app = *ev;
    m->disabled = false;
    return sync(m, epfd, true);
}

namespace {

// Turns what the kernel reported into the program's events, in place; returns how many
// remain.  Tags of members become their socket's real readiness.
// `seen`: members reported already in this call (one event per registration, as the
// kernel gives; the second registration of a member must not make a second event).
int translate(EpollSet *set, epoll_event *ev, int n, std::vector<Member *> &seen) {
    int out = 0;
    for (int i = 0; i < n; ++i) {
        uint64_t d = ev[i].data.u64;
        Member *m = nullptr;
        Snap snap{};
        if (d & kTagBit) {
            std::lock_guard<std::mutex> g(g_lock);
            auto it = set->by_tag.find(d);
            if (it != set->by_tag.end()) {
                m = it->second;
                if (m->disabled || std::find(seen.begin(), seen.end(), m) != seen.end() ||
                    !file_try_acquire(m->sock)) {
                    continue;
                }
                snap = {m->sock,
                        m->fd,
                        want_of(m),
                        m->app.data,
                        m,
                        (m->app.events & EPOLLONESHOT) != 0,
                        (m->app.events & EPOLLET) != 0};
            }
        }
        if (!m) {
            if (d & kTagBit) {
                std::lock_guard<std::mutex> g(g_lock);
                if (set->stale.count(d)) continue; // a socket of ours closed since
            }
            ev[out++] = ev[i];
            continue;
        }
        Under u;
        // An event of the second registration (a rendezvous's listener) says nothing
        // about the kernel connection: only "look again".
        short kernel = d == (m->tag ^ 2) ? 0 : static_cast<short>(ev[i].events & 0xffff);
        bool stream_reg = sock_under(snap.sock, snap.fd, snap.want).stream;
        short r = sock_poll(snap.sock, snap.fd, snap.want, stream_reg ? 0 : kernel, &u, snap.edge);
        if (r && snap.edge && stream_reg) {
            // A stream's descriptor wakes for any of its events: only edges count.
            uint64_t arrived = sock_arrivals(snap.sock);
            std::lock_guard<std::mutex> g(g_lock);
            if (set->by_tag.count(d)) r = edge_filter(m, r, arrived);
        }
        file_release(snap.sock);
        if (!r) continue;
        seen.push_back(m);
        if (snap.oneshot) {
            std::lock_guard<std::mutex> g(g_lock);
            if (set->by_tag.count(d)) m->disabled = true;
        }
        ev[out].events = static_cast<uint16_t>(r);
        ev[out].data = snap.data;
        ++out;
    }
    return out;
}

int kernel_wait(int epfd, epoll_event *out, int max, Deadline dl, const sigset_t *mask) {
    timespec ts{};
    timespec *tp = time_left(dl, &ts);
    // A kernel before 5.11 (a container on such a host) has no epoll_pwait2 though the C
    // library has its wrapper: ENOSYS, then epoll_pwait from then on.
    static std::atomic<bool> no_pwait2{false};
    if (real().epoll_pwait2 && !no_pwait2.load(std::memory_order_relaxed)) {
        int r = real().epoll_pwait2(epfd, out, max, tp, mask);
        if (r >= 0 || errno != ENOSYS) return r;
        no_pwait2.store(true, std::memory_order_relaxed);
    }
    int ms = -1;
    if (tp)
        ms = static_cast<int>(
            std::min<int64_t>((ts.tv_sec * 1000000000 + ts.tv_nsec + 999999) / 1000000, 1 << 30));
    return real().epoll_pwait(epfd, out, max, ms, mask);
}

} // namespace

int epoll_wait_set(EpollSet *set, int epfd, epoll_event *out, int max, Deadline dl,
                   const sigset_t *mask) noexcept {
    if (max <= 0) {
        errno = EINVAL;
        return -1;
    }
    std::vector<Snap> &snap = t_snap;
    std::vector<Member *> &seen = t_seen;
    for (;;) {
        snap.clear();
        seen.clear();
        {
            std::lock_guard<std::mutex> g(g_lock);
            Inside in;
            set->last_fd = epfd;
            for (auto &[fd, m] : set->by_fd) {
                if (m->dirty) sync(m, epfd, false);
                // Level-triggered stream members are looked at before sleeping: what a
                // stream holds already makes no new event on its descriptor.
                if (m->disabled) continue;
                if (m->sock->state.load(std::memory_order_acquire) != SockState::vipl) continue;
                if (!file_try_acquire(m->sock)) continue;
                // Edge-triggered ones are looked at only once after (re)registration (the
                // kernel reports a ready descriptor when it is added); then their events
                // say.  All are armed before the sleep.
                bool edge = (m->app.events & EPOLLET) != 0;
                snap.push_back({m->sock, m->fd, want_of(m), m->app.data, m,
                                (m->app.events & EPOLLONESHOT) != 0, edge, !edge || m->edge_fresh,
                                m->under_stream && (m->under_events & EPOLLET) != 0});
                m->edge_fresh = false;
            }
        }
        int n = 0;
        vipl::Spin spin;
        std::vector<bool> &hit = t_hit;
        hit.assign(snap.size(), false);
        // What a stream holds already makes no new event on its descriptor: look first,
        // then spin while libvipl's policy says it pays.  The first look may reuse a read's
        // (sock_poll's `first`): the streams are armed before the sleep.
        bool first = true;
        auto look = [&] {
            for (size_t i = 0; i < snap.size() && n < max; ++i) {
                if (hit[i] || !snap[i].look) continue;
                Snap &sn = snap[i];
                Under u;
                short r = sock_poll(sn.sock, sn.fd, sn.want, 0, &u, sn.edge, first);
                if (!r) continue;
                hit[i] = true;
                seen.push_back(sn.m);
                if (sn.edge) {
                    uint64_t arrived = sock_arrivals(sn.sock);
                    std::lock_guard<std::mutex> g(g_lock);
                    auto it = set->by_fd.find(sn.fd);
                    if (it != set->by_fd.end() && it->second == sn.m)
                        edge_filter(sn.m, r, arrived); // what is there when registered counts
                }
                out[n].events = static_cast<uint16_t>(r);
                out[n].data = sn.data;
                ++n;
                if (sn.oneshot) {
                    std::lock_guard<std::mutex> g(g_lock);
                    auto it = set->by_fd.find(sn.fd);
                    if (it != set->by_fd.end() && it->second == sn.m) sn.m->disabled = true;
                }
            }
            first = false;
            return n > 0;
        };
        if (!look() && !snap.empty() && !passed(dl)) {
            for (Snap &sn : snap) spin.add(sock_spin_budget(sn.sock));
            bool got = spin.run(look, dl);
            for (size_t i = 0; i < snap.size(); ++i) {
                SpinOf of{snap[i].sock};
                spin.report(of, got, hit[i]);
            }
        }
        // About to sleep: every stream arms its wait fd (libvipl rings it at the next
        // event only then), which also tells what came since the last look.
        if (n == 0)
            for (size_t i = 0; i < snap.size() && n < max; ++i) {
                Snap &sn = snap[i];
                short r = sock_arm(sn.sock, sn.fd, sn.want, sn.edge, sn.kernel_edge);
                if (r && sn.edge) {
                    // Arming takes what arrived: an edge found here is reported here.
                    uint64_t arrived = sock_arrivals(sn.sock);
                    std::lock_guard<std::mutex> g(g_lock);
                    auto it = set->by_fd.find(sn.fd);
                    r = it != set->by_fd.end() && it->second == sn.m ? edge_filter(sn.m, r, arrived)
                                                                     : 0;
                }
                if (!r) continue;
                out[n].events = static_cast<uint16_t>(r);
                out[n].data = sn.data;
                ++n;
                seen.push_back(sn.m);
                if (sn.oneshot) {
                    std::lock_guard<std::mutex> g(g_lock);
                    auto it = set->by_fd.find(sn.fd);
                    if (it != set->by_fd.end() && it->second == sn.m) sn.m->disabled = true;
                }
            }
        for (Snap &sn : snap) file_release(sn.sock);
        snap.clear();
        if (n > 0) {
            // Add what the kernel has ready now, without waiting, if there is room (a
            // caller that asks for one event, as PostgreSQL does, gets the stream's).
            if (n < max) {
                int k = kernel_wait(epfd, out + n, max - n, Deadline{}, nullptr);
                if (k > 0) n += translate(set, out + n, k, seen);
            }
            return n;
        }
        int k = kernel_wait(epfd, out, max, dl, mask);
        if (k <= 0) return k;
        seen.clear();
        n = translate(set, out, k, seen);
        if (n > 0) return n;
        if (passed(dl)) return 0;
    }
}

} // namespace vipl::db
