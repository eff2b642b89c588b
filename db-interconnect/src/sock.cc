// Sock: making, tracking, readiness, fork and the end of a socket.
#include "sock.h"

#include "config.h"
#include "epoll_set.h"
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

// How many bytes a client may write before its server decided (a kernel socket takes
// about as much before a writer blocks).
constexpr size_t kOutbufMax = 256 * 1024;

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
    if (s->stream.is_open()) {
        std::error_code ec =
            s->stream.close(vipl::deadline_in(std::chrono::milliseconds(config().linger_ms)));
        if (ec && ec != std::errc::not_connected)
            VIPL_DB_WARN("closing a vipl connection: %s", ec.message().c_str());
    }
    if (s->marker_fd >= 0) real().close(s->marker_fd);
    stat_close(s->stat);
    s->stat = nullptr;
    s->marker_fd = -1;
    s->state.store(SockState::fresh, std::memory_order_relaxed);
    s->family = 0;
    s->nonblock = s->flags_stale = s->shut_rd = s->shut_wr = false;
    s->rcv_timeout_ms = s->snd_timeout_ms = 0;
    s->remote_rule = false;
    s->dest = {};
    s->dest_len = 0;
    s->hello = {};
    s->outbuf.clear();
    s->outbuf.shrink_to_fit();
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

short sock_poll(Sock *s, int fd, short want, short krev, Under *u) noexcept {
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
            *u = {fd, POLLIN, false};
            short r = 0;
            if (krev & (POLLIN | POLLERR | POLLHUP)) {
                std::lock_guard<std::mutex> g(s->mu);
                Inside in;
                if (s->state.load() == SockState::hello_sent && client_look(s, fd)) continue;
            }
            if (s->state.load() != SockState::hello_sent) continue;
            std::lock_guard<std::mutex> g(s->mu);
            if ((want & POLLOUT) && s->outbuf.size() < kOutbufMax) r |= POLLOUT;
            return r;
        }
        case SockState::vipl: {
            *u = {s->stream.fd(), POLLIN, true};
            short ev = s->stream.events();
            if (s->shut_rd) ev |= POLLIN | POLLRDHUP;
            return static_cast<short>(ev & ask);
        }
        default:
            // The kernel connection's own readiness is the truth.
            *u = {fd, want, false};
            return static_cast<short>(krev & ask);
        }
    }
    return 0;
}

Under sock_under(Sock *s, int fd, short want) noexcept {
    switch (s->state.load(std::memory_order_acquire)) {
    case SockState::connecting:
        return {fd, static_cast<short>(POLLOUT | (want & POLLIN)), false};
    case SockState::hello_sent:
        return {fd, POLLIN, false};
    case SockState::vipl:
        return {s->stream.fd(), POLLIN, true};
    default:
        return {fd, want, false};
    }
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
