// Sock: making, tracking, readiness, fork and the end of a socket.
#include "sock.h"

#include "config.h"
#include "epoll_set.h"
#include "handover.h"
#include "kernel_io.h"
#include "log.h"
#include "marker.h"
#include "negotiate.h"
#include "real.h"
#include "stats.h"
#include "thread_state.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace vipl::db {

namespace {

// Sock objects are reused, never freed (files.h: lookups race with the last release).
std::mutex g_pool_mu;
std::vector<Sock *> g_pool;

constexpr short kAlways = POLLERR | POLLHUP | POLLNVAL;

} // namespace

std::mutex &sock_pool_lock() {
    return g_pool_mu;
}

const char *state_name(SockState s) {
    switch (s) {
    case SockState::fresh:
        return "fresh";
    case SockState::listening:
        return "listening";
    case SockState::connecting:
        return "connecting";
    case SockState::hello_sent:
        return "hello-sent";
    case SockState::undecided:
        return "undecided";
    case SockState::accepting:
        return "accepting";
    case SockState::strip_hello:
        return "strip-hello";
    case SockState::strip_reply:
        return "strip-reply";
    case SockState::plain:
        return "kernel";
    case SockState::vipl:
        return "vipl";
    }
    return "?";
}

Sock *sock_new(SockState state, int family) noexcept {
    Sock *s = nullptr;
    {
        std::lock_guard<std::mutex> g(g_pool_mu);
        if (!g_pool.empty()) {
            s = g_pool.back();
            g_pool.pop_back();
        }
    }
    if (!s) s = new (std::nothrow) Sock;
    if (!s) return nullptr;
    s->state.store(state, std::memory_order_relaxed);
    s->family = family;
    return s;
}

void sock_listening(Sock *s, int fd) noexcept {
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &sl) != 0) return;
    std::string name = marker_name(reinterpret_cast<sockaddr *>(&ss), sl);
    if (name.empty()) return;
    s->marker_fd = marker_publish(name);
    if (s->marker_fd < 0)
        VIPL_DB_WARN("fd %d: cannot publish marker %s: %s", fd, name.c_str(), strerror(errno));
    else
        VIPL_DB_INFO("fd %d listens for vipl clients (%s)", fd, name.c_str());
}

void sock_untrack(Sock *s, int fd) noexcept {
    if (s->slots.load() != 1 || fd_peek(fd) != s) return;
    epoll_sock_untrack(s);
    if (File *f = fd_remove(fd)) file_release(f);
}

// The last reference: everything the socket held goes; the object returns to the pool.
static void sock_destroy(Sock *s) noexcept {
    Inside in;
    epoll_sock_gone(s);
    sock_stat_sync(s);
    // The last close of a socket returns at once, as the kernel's does; the stream
    // finishes delivering what was written by itself (linger.cc).
    if (s->stream.is_open()) linger_stream(std::move(s->stream));
    s->rendezvous = vipl::Listener();
    if (s->marker_fd >= 0) real().close(s->marker_fd);
    stat_close(s->stat);
    s->stat = nullptr;
    s->marker_fd = -1;
    s->state.store(SockState::fresh, std::memory_order_relaxed);
    s->family = 0;
    s->nonblock = s->flags_stale = s->shut_rd = s->shut_wr = false;
    s->reset_told = s->send_failed = false;
    s->spun = s->slept = 0;
    s->rcv_timeout_ms = s->snd_timeout_ms = 0;
    s->remote_rule = false;
    s->dest = {};
    s->dest_len = 0;
    s->hello = {};
    s->pre_bytes = 0;
    s->members.clear();
    std::lock_guard<std::mutex> g(g_pool_mu);
    g_pool.push_back(s);
}

void epoll_set_destroy(EpollSet *e) noexcept;

void file_destroy(File *f) noexcept {
    if (f->kind == File::Kind::sock)
        sock_destroy(static_cast<Sock *>(f));
    else
        epoll_set_destroy(static_cast<EpollSet *>(f));
}

// ------------------------------------------------------------------ readiness

// A stream's readiness as the kernel reports a socket's.  The stream knows less than a
// kernel connection about how it ended: a peer that closed (kFlagClosed) or died hangs
// up a unix socket; a TCP one hangs up only once both directions are shut, or with an
// error (a reset) when the peer left data of ours unread.
static short as_socket(Sock *s, short ev) noexcept {
    if (ev & POLLERR) {
        // Broken: the peer died (or reset).  The error shows until a read reported it.
        short r = POLLIN | POLLOUT | POLLRDHUP;
        if (!s->reset_told && s->stream.peer_unread())
            r |= POLLERR | POLLHUP;
        else if (s->family == AF_UNIX || s->send_failed || s->shut_wr)
            r |= POLLHUP;
        return r;
    }
    if ((ev & POLLRDHUP) && s->family == AF_UNIX && s->stream.peer_closed()) ev |= POLLHUP;
    if (s->shut_rd) ev |= POLLIN | POLLRDHUP;
    if (s->shut_rd && s->shut_wr) ev |= POLLHUP; // both directions shut here
    return ev;
}

short vipl_events(Sock *s, short arm_for, bool kernel_edge) noexcept {
    // No look of the arming's own: sock_arm's callers just looked (sock_poll), or wait
    // edge-triggered; what came since makes the wait fd readable at once either way.
    return as_socket(s, arm_for >= 0 ? s->stream.arm(arm_for, true, false, kernel_edge)
                                     : s->stream.events());
}

short sock_poll(Sock *s, int fd, short want, short krev, Under *u, bool edge, bool first) noexcept {
    short ask = static_cast<short>(want | kAlways);
    for (int round = 0; round < 4; ++round) {
        SockState st = s->state.load(std::memory_order_acquire);
        switch (st) {
        case SockState::connecting: {
            *u = {fd, static_cast<short>(POLLOUT | (want & POLLIN)), false};
            if (!(krev & (POLLOUT | POLLERR | POLLHUP))) return 0;
            {
                std::lock_guard<std::mutex> g(s->mu);
                Inside in;
                if (s->state.load() == SockState::connecting) {
                    // A failed connect leaves its error for the program's SO_ERROR.
                    if (krev & (POLLERR | POLLHUP))
                        s->state.store(SockState::plain);
                    else
                        client_connected(s, fd);
                    epoll_sock_changed(s);
                }
            }
            continue;
        }
        case SockState::hello_sent: {
            // The program writes to the kernel connection meanwhile; the REPLY comes there.
            *u = {fd, static_cast<short>(POLLIN | (want & POLLOUT)), false};
            if (krev & (POLLIN | POLLERR | POLLHUP)) {
                std::lock_guard<std::mutex> g(s->mu);
                Inside in;
                if (s->state.load() == SockState::hello_sent && client_look(s, fd)) continue;
            }
            if (s->state.load() != SockState::hello_sent) continue;
            return static_cast<short>(krev & (POLLOUT | POLLERR | POLLHUP) & ask);
        }
        case SockState::accepting: {
            // The client's bytes on the kernel connection, and its stream at the
            // rendezvous (whose listener wakes us when it comes).
            // Writable only once the stream is here (the listener's fd says when).
            *u = {fd, static_cast<short>(want & POLLIN), false, s->rendezvous.fd()};
            {
                std::lock_guard<std::mutex> g(s->mu);
                Inside in;
                if (s->state.load() == SockState::accepting && accept_step(s, fd, Deadline{}))
                    continue;
            }
            if (s->state.load() != SockState::accepting) continue;
            return static_cast<short>(krev & ask & ~POLLOUT);
        }
        case SockState::vipl: {
            if (s->pre_bytes > 0) {
                // The client's first bytes are still on the kernel connection.
                *u = {fd, POLLIN, false};
                short out = static_cast<short>(s->stream.events() & POLLOUT);
                return static_cast<short>(((krev & POLLIN) | out) & ask);
            }
            *u = {s->stream.wait_fd(), POLLIN, true};
            short ev = first ? as_socket(s, s->stream.events_before_arming()) : vipl_events(s);
            if ((ev & POLLRDHUP) && s->stream.switching()) {
                // The peer exec'd: the connection goes on on the kernel socket.
                std::lock_guard<std::mutex> g(s->mu);
                if (s->state.load() == SockState::vipl) switch_to_kernel(s, fd);
                continue;
            }
            return static_cast<short>(ev & ask);
        }
        default:
            // The kernel connection's own readiness is the truth (and bytes a hand-over
            // left to deliver first).
            *u = {fd, want, false};
            if (st == SockState::plain && has_prefix(s) && (want & POLLIN))
                return static_cast<short>((krev & ask) | POLLIN);
            return static_cast<short>(krev & ask);
        }
    }
    return 0;
}

uint64_t sock_arrivals(Sock *s) noexcept {
    if (s->state.load(std::memory_order_acquire) != SockState::vipl) return 0;
    vipl::StreamCounters c = s->stream.stream_counters();
    return c.messages_in + c.control_in;
}

Under sock_under(Sock *s, int fd, short want) noexcept {
    switch (s->state.load(std::memory_order_acquire)) {
    case SockState::connecting:
        return {fd, static_cast<short>(POLLOUT | (want & POLLIN)), false};
    case SockState::hello_sent:
        return {fd, static_cast<short>(POLLIN | (want & POLLOUT)), false};
    case SockState::accepting:
        return {fd, static_cast<short>(want & POLLIN), false, s->rendezvous.fd()};
    case SockState::vipl:
        if (s->pre_bytes > 0) return {fd, POLLIN, false};
        return {s->stream.wait_fd(), POLLIN, true};
    default:
        return {fd, want, false};
    }
}

short sock_arm(Sock *s, int fd, short want, bool edge, bool kernel_edge) noexcept {
    if (s->state.load(std::memory_order_acquire) != SockState::vipl || s->pre_bytes > 0) return 0;
    // An edge-triggered waiter wants every new arrival: armed even while data waits.
    short ev =
        vipl_events(s, edge ? 0 : static_cast<short>(want & (POLLIN | POLLOUT)), kernel_edge);
    short r = static_cast<short>(ev & (want | POLLERR | POLLHUP | POLLNVAL));
    if (!r) {
        ++s->slept; // the waiter sleeps now
        sock_stat_sync(s);
    }
    return r;
}

int sock_sleep(Sock *s, short want, Deadline dl, short *revents) noexcept {
    // A stream another process holds too may be waited on there: its wait fd tells all.
    if (s->state.load(std::memory_order_acquire) != SockState::vipl || s->pre_bytes > 0 ||
        s->stream.shared_with_others())
        return 2;
    // Counted before: the table shows a sleeper asleep.
    ++s->slept;
    sock_stat_sync(s);
    std::error_code ec;
    short ev =
        as_socket(s, s->stream.sleep_for(static_cast<short>(want & (POLLIN | POLLOUT)), dl, ec));
    *revents = static_cast<short>(ev & (want | POLLERR | POLLHUP | POLLNVAL));
    if (*revents) {
        --s->slept; // ready after all: no sleep
        sock_stat_sync(s);
        return 1;
    }
    return ec == std::errc::interrupted ? -1 : 0;
}

void sock_stat_sync(Sock *s) noexcept {
    if (!s->stat || s->state.load(std::memory_order_acquire) != SockState::vipl) return;
    vipl::StreamCounters c = s->stream.stream_counters();
    StatSlot &t = *s->stat;
    t.messages_in.store(c.messages_in, std::memory_order_relaxed);
    t.messages_out.store(c.messages_out, std::memory_order_relaxed);
    t.spins.store(c.spin_wins + s->spun, std::memory_order_relaxed);
    t.sleeps.store(c.sleeps + s->slept, std::memory_order_relaxed);
}

vipl::SpinBudget sock_spin_budget(Sock *s) noexcept {
    if (s->state.load(std::memory_order_acquire) != SockState::vipl) return {};
    return s->stream.spin_budget();
}

void sock_spin_outcome(Sock *s, bool won) noexcept {
    if (s->state.load(std::memory_order_acquire) == SockState::vipl) s->stream.spin_outcome(won);
}

// ------------------------------------------------------------------ fork

void sock_before_fork(Sock *s, int fd) noexcept {
    std::lock_guard<std::mutex> g(s->mu);
    Inside in;
    SockState st = s->state.load();
    if (st == SockState::accepting) {
        // The rendezvous is this process's: take the stream now, or stay on the kernel.
        accept_step(s, fd, s->rendezvous_until);
        return;
    }
    if (st == SockState::connecting) {
        // No hello went out: the connection simply stays on the kernel in both.
        s->state.store(SockState::plain);
        epoll_sock_changed(s);
        return;
    }
    if (st != SockState::hello_sent) return;
    Deadline dl = Clock::now() + std::chrono::milliseconds(config().negotiate_ms);
    while (s->state.load() == SockState::hello_sent) {
        if (client_look(s, fd)) break;
        if (Clock::now() >= dl) {
            client_give_up(s, fd);
            break;
        }
        kwait(fd, POLLIN, dl);
    }
}

void sock_after_fork_child(Sock *s) noexcept {
    s->flags_stale = true;
}

} // namespace vipl::db
