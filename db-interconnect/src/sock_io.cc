// Sock: reading, writing and shutting down, in whatever state the socket is.
#include "sock.h"

#include "config.h"
#include "epoll_set.h"
#include "handover.h"
#include "kernel_io.h"
#include "negotiate.h"
#include "real.h"
#include "stats.h"
#include "thread_state.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace vipl::db {

namespace {

size_t iov_total(const iovec *iov, int n) {
    size_t t = 0;
    for (int i = 0; i < n; ++i) t += iov[i].iov_len;
    return t;
}

// Where a receive or send has got to in its buffer list: the rest of the current buffer,
// empty buffers skipped.  A plain inline cursor, no copy and no indirection, since every
// byte of a stream goes through it; Byte is const std::byte for a send.
template <class Byte>
struct IovCursor {
    const iovec *iov;
    int cnt;
    int i = 0;
    size_t off = 0;

    // The unread (unsent) part of the current buffer; empty once the list is done.
    std::span<Byte> rest() {
        while (i < cnt && off == iov[i].iov_len) {
            ++i;
            off = 0;
        }
        if (i == cnt) return {};
        return {static_cast<Byte *>(iov[i].iov_base) + off, iov[i].iov_len - off};
    }
    void advance(size_t n) { off += n; }
};

void refresh_flags(Sock *s, int fd) {
    if (!s->flags_stale) return;
    int fl = real().fcntl(fd, F_GETFL);
    if (fl >= 0) s->nonblock = (fl & O_NONBLOCK) != 0;
    s->flags_stale = false;
}

Deadline timeout_deadline(int ms) {
    return ms > 0 ? Clock::now() + std::chrono::milliseconds(ms) : Deadline::max();
}

// One call that moved n bytes, on the socket's statistics row (when it has one).
void count_in(Sock *s, uint64_t n) {
    if (!s->stat) return;
    stat_add(s->stat->calls_in, 1);
    stat_add(s->stat->bytes_in, n);
}

void count_out(Sock *s, uint64_t n) {
    if (!s->stat) return;
    stat_add(s->stat->calls_out, 1);
    stat_add(s->stat->bytes_out, n);
}

// The passes of a call that may wait for the negotiation to settle.  Each pass, under the
// socket's lock, reads the flags again (fcntl may have changed them meanwhile); the first
// also fixes the call's deadline from the socket's timeout.
struct Passes {
    // Signals that do not restart calls, counted when the call began.
    uint32_t mark = t_state.interrupts_no_restart;
    Deadline dl = Deadline::max();
    bool first = true;

    // With s->mu held: whether this pass may not wait.
    bool begin(Sock *s, int fd, int flags, int Sock::*timeout_ms) {
        refresh_flags(s, fd);
        if (first) dl = timeout_deadline(s->*timeout_ms);
        first = false;
        return s->nonblock || (flags & MSG_DONTWAIT);
    }

    // After a wait that returned r: whether the call ends here with -1, its deadline
    // passed (EAGAIN) or a signal that does not restart calls interrupted it.
    bool over(int r) const {
        if (r == 0 && Clock::now() >= dl) {
            errno = EAGAIN;
            return true;
        }
        return r < 0 && errno == EINTR && t_state.interrupts_no_restart != mark;
    }
};

// As the kernel does for a write to a connection that cannot take it.
void raise_sigpipe(int flags) {
    if (!(flags & MSG_NOSIGNAL)) pthread_kill(pthread_self(), SIGPIPE);
}

// Settles what the call needs decided; returns the state to act on.  With s->mu held.
SockState settle(Sock *s, int fd, bool writing) {
    for (int round = 0; round < 4; ++round) {
        SockState st = s->state.load();
        switch (st) {
        case SockState::connecting: {
            pollfd p{fd, POLLOUT, 0};
            if (real().poll(&p, 1, 0) != 1) return st;
            if (p.revents & (POLLERR | POLLHUP)) {
                // The error stays for the program's SO_ERROR and its next call.
                s->state.store(SockState::plain);
                return SockState::plain;
            }
            client_connected(s, fd);
            continue;
        }
        case SockState::hello_sent:
            if (!client_look(s, fd)) return st;
            continue;
        case SockState::undecided:
            if (!server_look(s, fd, writing)) return st;
            continue;
        case SockState::accepting: {
            // A write needs the client's stream (the client, waiting for an answer, reads
            // the REPLY and comes).  A non-blocking write that speaks first would block
            // (EAGAIN) meanwhile.  A write that answers bytes the program read, or a
            // blocking one, may not be refused (a kernel socket takes a connection's first
            // answer at once: PostgreSQL sends its SSL and GSS negotiation byte with one
            // bare send): it waits for the stream, then gives the rendezvous up and goes
            // on the kernel, where the client follows (its stream finds no rendezvous).
            // A non-blocking one briefly, because the client may be unable to come:
            // inside a signal handler that connects to this very server (PQcancel),
            // whose one thread (an event loop) must not wait for it long.
            // A blocking program waits the whole rendezvous: it serves one connection
            // at a time (a handler of its client connecting to it would wait for it over
            // kernel sockets too).
            bool answer = writing && (!s->nonblock || s->pre_bytes > 0);
            Deadline wait = !answer       ? Deadline{}
                            : s->nonblock ? Clock::now() + kAnswerWait
                                          : s->rendezvous_until;
            if (accept_step(s, fd, std::min(wait, s->rendezvous_until))) continue;
            if (!answer) return st;
            give_up_rendezvous(s, fd,
                               "the client did not come to the rendezvous before the "
                               "program answered");
            continue;
        }
        case SockState::strip_hello:
        case SockState::strip_reply:
            if (writing || !strip_look(s, fd)) return st;
            continue;
        default:
            return st;
        }
    }
    return s->state.load();
}

bool waiting_for_peer(SockState st) {
    return st == SockState::hello_sent || st == SockState::undecided ||
           st == SockState::strip_hello || st == SockState::strip_reply;
}

std::error_code errc(std::errc e) {
    return std::make_error_code(e);
}

bool would_block(const std::error_code &ec) {
    return ec == errc(std::errc::timed_out) || ec == errc(std::errc::operation_would_block);
}

ssize_t vipl_peek(Sock *s, const iovec *iov, int iovcnt, size_t total, Deadline dl, uint32_t mark) {
    std::vector<std::byte> tmp(std::min<size_t>(total, 256 * 1024));
    std::error_code ec;
    size_t n;
    for (;;) {
        n = s->stream.peek(tmp, dl, ec);
        if (ec != errc(std::errc::interrupted)) break;
        if (t_state.interrupts_no_restart != mark) {
            errno = EINTR;
            return -1;
        }
    }
    if (n == 0 && ec) {
        errno = would_block(ec) ? EAGAIN : ECONNRESET;
        return -1;
    }
    size_t off = 0;
    for (int i = 0; i < iovcnt && off < n; ++i) {
        size_t k = std::min(iov[i].iov_len, n - off);
        std::memcpy(iov[i].iov_base, tmp.data() + off, k);
        off += k;
    }
    return static_cast<ssize_t>(n);
}

// The client's bytes from before the stream, still on the kernel connection: read there
// first (at most as many as it wrote there), with the program's own flags and blocking.
ssize_t pre_recv(Sock *s, int fd, const iovec *iov, int iovcnt, int flags) {
    iovec v[8];
    int n = 0;
    uint64_t left = s->pre_bytes;
    for (int i = 0; i < iovcnt && n < 8 && left > 0; ++i) {
        size_t k = static_cast<size_t>(std::min<uint64_t>(iov[i].iov_len, left));
        if (!k) continue;
        v[n++] = {iov[i].iov_base, k};
        left -= k;
    }
    msghdr m{};
    m.msg_iov = v;
    m.msg_iovlen = static_cast<size_t>(n);
    ssize_t r = real().recvmsg(fd, &m, flags & ~MSG_WAITALL);
    if (r == 0 && n > 0) {
        // The kernel connection ended before the bytes announced: the client went.
        errno = ECONNRESET;
        return -1;
    }
    if (r > 0 && !(flags & MSG_PEEK)) {
        s->pre_bytes -= static_cast<uint64_t>(r);
        if (s->pre_bytes == 0) epoll_sock_changed(s); // from now on: the stream's fd
        count_in(s, static_cast<uint64_t>(r));
    }
    return r;
}

ssize_t vipl_recv(Sock *s, int fd, const iovec *iov, int iovcnt, int flags, bool nb,
                  uint32_t mark) {
    if (flags & MSG_OOB) {
        errno = EINVAL; // no urgent data ever arrives on a stream
        return -1;
    }
    size_t total = iov_total(iov, iovcnt);
    if (total == 0) return 0;
    // Shut for reading: a unix socket reads nothing more; a TCP one still gives what
    // comes, but never waits (the end of stream instead).
    if (s->shut_rd && (s->family == AF_UNIX || s->stream.readable_bytes() == 0)) return 0;
    Deadline dl = nb || s->shut_rd ? Deadline{} : timeout_deadline(s->rcv_timeout_ms);
    if (flags & MSG_PEEK) return vipl_peek(s, iov, iovcnt, total, dl, mark);
    bool all = (flags & MSG_WAITALL) && !nb;
    size_t got = 0;
    IovCursor<std::byte> at{iov, iovcnt};
    std::error_code ec;
    while (got < total) {
        std::span<std::byte> seg = at.rest();
        if (seg.empty()) break;
        size_t n = s->stream.read(seg, got > 0 && !all ? Deadline{} : dl, ec);
        if (n > 0) {
            got += n;
            at.advance(n);
            // Short of this piece: the stream held no more.  A kernel recv() returns
            // then too; asking again would be one more look at the VI per call (on the
            // tcp provider a recv() that finds nothing).
            if (n < seg.size() && !all) break;
            continue;
        }
        if (!ec) break; // end of stream
        if (got > 0) break;
        if (ec == errc(std::errc::interrupted)) {
            if (t_state.interrupts_no_restart != mark) {
                errno = EINTR;
                return -1;
            }
            continue;
        }
        if (would_block(ec)) {
            epoll_sock_drained(s, POLLIN);
            errno = EAGAIN;
            return -1;
        }
        // The connection broke (the peer died or reset): a reset once if the peer left
        // data of ours unread, as the kernel reports it, then the end of stream.
        bool reset = !s->reset_told && s->stream.peer_unread();
        s->reset_told = true;
        if (!reset) return 0;
        errno = ECONNRESET;
        return -1;
    }
    if (got == 0 && s->stream.switching()) {
        // Not the end: the peer exec'd and its bytes come on the kernel connection now.
        std::lock_guard<std::mutex> g(s->mu);
        if (s->state.load() == SockState::vipl) switch_to_kernel(s, fd);
        return kKernel;
    }
    count_in(s, got);
    // A blocking reader waits inside the stream, never in an arm: its table row learns
    // the stream's counters every so often.
    if (s->stat && !nb && (s->stat->calls_in.load(std::memory_order_relaxed) & 63) == 0)
        sock_stat_sync(s);
    return static_cast<ssize_t>(got);
}

ssize_t vipl_send(Sock *s, const iovec *iov, int iovcnt, int flags, bool nb, uint32_t mark) {
    if (flags & MSG_OOB) {
        errno = EOPNOTSUPP;
        return -1;
    }
    if (s->shut_wr) {
        raise_sigpipe(flags);
        errno = EPIPE;
        return -1;
    }
    size_t total = iov_total(iov, iovcnt);
    Deadline dl = nb ? Deadline{} : timeout_deadline(s->snd_timeout_ms);
    // A gathered send is one piece for the peer, as the kernel makes one of it: up to a
    // buffer's worth, gather it into one write.
    thread_local std::vector<std::byte> t_gather VIPL_DB_TLS;
    iovec one;
    if (iovcnt > 1 && total <= 64 * 1024) {
        t_gather.resize(total);
        size_t at = 0;
        for (int k = 0; k < iovcnt; ++k) {
            if (iov[k].iov_len) std::memcpy(t_gather.data() + at, iov[k].iov_base, iov[k].iov_len);
            at += iov[k].iov_len;
        }
        one = {t_gather.data(), total};
        iov = &one;
        iovcnt = 1;
    }
    size_t got = 0;
    IovCursor<const std::byte> at{iov, iovcnt};
    std::error_code ec;
    while (got < total) {
        std::span<const std::byte> seg = at.rest();
        if (seg.empty()) break;
        size_t n = s->stream.write(seg, dl, ec);
        got += n;
        at.advance(n);
        if (n == seg.size()) continue;
        if (got > 0) break; // part of it: the count, as a socket gives
        if (ec == errc(std::errc::interrupted)) {
            if (t_state.interrupts_no_restart != mark) {
                errno = EINTR;
                return -1;
            }
            continue;
        }
        if (!ec || would_block(ec)) {
            epoll_sock_drained(s, POLLOUT);
            errno = EAGAIN;
            return -1;
        }
        if (s->stream.switching()) {
            // Handed back to the kernel (a holder of ours or the peer exec'd): go on there.
            std::lock_guard<std::mutex> g(s->mu);
            if (s->state.load() == SockState::vipl) switch_to_kernel(s, -1);
            return kKernel;
        }
        s->send_failed = true;
        raise_sigpipe(flags);
        errno = EPIPE;
        return -1;
    }
    if (!nb && got > 0) {
        // A blocking send returns once its bytes are in the transport, as a socket's
        // returns once the kernel has them: nothing then needs another call of ours.
        for (;;) {
            std::error_code f = s->stream.flush(dl);
            if (f != errc(std::errc::interrupted) || t_state.interrupts_no_restart != mark) break;
        }
    }
    count_out(s, got);
    if (s->stat && !nb && (s->stat->calls_out.load(std::memory_order_relaxed) & 63) == 0)
        sock_stat_sync(s);
    return static_cast<ssize_t>(got);
}

// A socket handed back to the kernel (handover.h): its own first bytes, then what the
// stream had delivered, then the kernel connection's.
ssize_t prefix_recv(Sock *s, int fd, const iovec *iov, int iovcnt, int flags) {
    if (s->pre_bytes > 0) return pre_recv(s, fd, iov, iovcnt, flags);
    size_t n = 0;
    for (int i = 0; i < iovcnt && s->prefix_off + n < s->prefix.size(); ++i) {
        size_t k = std::min(iov[i].iov_len, s->prefix.size() - s->prefix_off - n);
        std::memcpy(iov[i].iov_base, s->prefix.data() + s->prefix_off + n, k);
        n += k;
    }
    if (!(flags & MSG_PEEK)) {
        s->prefix_off += n;
        if (!has_prefix(s)) {
            s->prefix.clear();
            s->prefix_off = 0;
        }
    }
    return static_cast<ssize_t>(n);
}

// A call's bytes on the kernel connection before the decision (a server's before the
// client's stream comes, a client's before the REPLY): never waiting, and counted in
// pre_bytes unless only peeked at, since the stream's prologue says how many went this way.
ssize_t pre_decision_io(Sock *s, int fd, const iovec *iov, int iovcnt, int flags, bool out) {
    msghdr m{};
    m.msg_iov = const_cast<iovec *>(iov);
    m.msg_iovlen = static_cast<size_t>(iovcnt);
    ssize_t n = out ? real().sendmsg(fd, &m, flags | MSG_DONTWAIT)
                    : real().recvmsg(fd, &m, flags | MSG_DONTWAIT);
    if (n > 0 && (out || !(flags & MSG_PEEK))) {
        s->pre_bytes += static_cast<uint64_t>(n);
        if (out)
            count_out(s, static_cast<uint64_t>(n));
        else
            count_in(s, static_cast<uint64_t>(n));
    }
    return n;
}

} // namespace

ssize_t sock_recv(Sock *s, int fd, const iovec *iov, int iovcnt, int flags) noexcept {
    Passes pass;
    // Riding vipl is final: no lock is needed to know it.
    if (s->state.load(std::memory_order_acquire) == SockState::vipl && !s->flags_stale) {
        if (s->pre_bytes > 0) return pre_recv(s, fd, iov, iovcnt, flags);
        return vipl_recv(s, fd, iov, iovcnt, flags, s->nonblock || (flags & MSG_DONTWAIT),
                         pass.mark);
    }
    for (;;) {
        SockState st;
        bool nb;
        {
            std::lock_guard<std::mutex> g(s->mu);
            Inside in;
            nb = pass.begin(s, fd, flags, &Sock::rcv_timeout_ms);
            if (s->state.load() == SockState::plain && (has_prefix(s) || s->pre_bytes > 0))
                return prefix_recv(s, fd, iov, iovcnt, flags);
            st = settle(s, fd, false);
            if (st == SockState::accepting) {
                // Until the client's stream comes, its bytes arrive on the kernel
                // connection: the program reads them as they are, counted (under the lock:
                // the stream's prologue says how many came this way).
                ssize_t n = pre_decision_io(s, fd, iov, iovcnt, flags, false);
                if (n == 0) {
                    // The client left without coming: the connection ends on the kernel.
                    give_up_rendezvous(s, fd, nullptr);
                }
                if (n >= 0 || errno != EAGAIN || nb) return n;
            }
        }
        if (st == SockState::vipl) {
            Inside in;
            if (s->pre_bytes > 0) return pre_recv(s, fd, iov, iovcnt, flags);
            return vipl_recv(s, fd, iov, iovcnt, flags, nb, pass.mark);
        }
        if (st != SockState::accepting && !waiting_for_peer(st)) return kKernel;
        if (nb) {
            errno = EAGAIN;
            return -1;
        }
        int r = st == SockState::accepting
                    ? kwait2(fd, s->rendezvous.fd(),
                             negotiation_slice(std::min(pass.dl, s->rendezvous_until)))
                    : kwait(fd, POLLIN, negotiation_slice(pass.dl));
        if (pass.over(r)) return -1;
    }
}

ssize_t sock_send(Sock *s, int fd, const iovec *iov, int iovcnt, int flags) noexcept {
    Passes pass;
    if (s->state.load(std::memory_order_acquire) == SockState::vipl && !s->flags_stale)
        return vipl_send(s, iov, iovcnt, flags, s->nonblock || (flags & MSG_DONTWAIT), pass.mark);
    for (;;) {
        SockState st;
        bool nb;
        {
            std::lock_guard<std::mutex> g(s->mu);
            Inside in;
            nb = pass.begin(s, fd, flags, &Sock::snd_timeout_ms);
            st = settle(s, fd, true);
            if (st == SockState::hello_sent) {
                // Before the decision the bytes go to the kernel connection, counted: the
                // server reads that many there before the stream (hello.h).  Without
                // waiting under the lock: the REPLY may need it.
                ssize_t n = pre_decision_io(s, fd, iov, iovcnt, flags, true);
                if (n > 0) return n;
                if (n == 0 || errno != EAGAIN || nb) return n;
            }
        }
        if (st == SockState::vipl) {
            Inside in;
            return vipl_send(s, iov, iovcnt, flags, nb, pass.mark);
        }
        if (st == SockState::accepting) {
            errno = EAGAIN; // non-blocking: writable once the client's stream is here
            return -1;
        }
        if (st != SockState::hello_sent) return kKernel;
        // The kernel connection is full and its server has not decided: wait for room
        // or for its answer.
        int r = kwait(fd, POLLIN | POLLOUT, negotiation_slice(pass.dl));
        if (pass.over(r)) return -1;
    }
}

int sock_readable_bytes(Sock *s) noexcept {
    // Bytes still on the kernel connection: the kernel counts them.
    if (s->state.load() != SockState::vipl || s->pre_bytes > 0) return -1;
    Inside in;
    if (s->shut_rd && s->family == AF_UNIX) return 0;
    size_t n = s->stream.readable_bytes();
    return static_cast<int>(std::min<size_t>(n, 0x7fffffff));
}

int sock_shutdown(Sock *s, int fd, int how) noexcept {
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
        errno = EINVAL;
        return -1;
    }
    std::lock_guard<std::mutex> g(s->mu);
    Inside in;
    // Nothing can stop half way through a negotiation: finish it first.
    if (s->state.load() == SockState::hello_sent) {
        Deadline dl = Clock::now() + std::chrono::milliseconds(config().negotiate_ms);
        while (s->state.load() == SockState::hello_sent && !client_look(s, fd)) {
            if (Clock::now() >= dl) {
                client_give_up(s, fd);
                break;
            }
            kwait(fd, POLLIN, dl);
        }
    }
    if (s->state.load() == SockState::undecided) server_look(s, fd, how != SHUT_RD);
    if (s->state.load() != SockState::vipl) return static_cast<int>(kKernel);
    if (how != SHUT_RD) {
        std::error_code ec;
        s->stream.shutdown_write(ec);
        s->shut_wr = true;
    }
    if (how != SHUT_WR && !s->shut_rd) {
        s->shut_rd = true;
        // A unix socket's peer learns it (its writes fail); a TCP one's does not.
        if (s->family == AF_UNIX) {
            std::error_code ec;
            s->stream.shutdown_read(ec);
        }
    }
    return 0;
}

} // namespace vipl::db
