#include "negotiate.h"

#include "config.h"
#include "epoll_set.h"
#include "kernel_io.h"
#include "log.h"
#include "marker.h"
#include "one_cpu_memo.h"
#include "placement.h"
#include "real.h"
#include "stats.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstring>

namespace vipl::db {

namespace {

Deadline step_deadline(unsigned times = 1) {
    return Clock::now() + std::chrono::milliseconds(config().negotiate_ms) * times;
}

std::string hex(const uint8_t *p, size_t n) {
    static const char digits[] = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; ++i) {
        s += digits[p[i] >> 4];
        s += digits[p[i] & 15];
    }
    return s;
}

// The numeric IP of one end of a TCP connection.
std::string ip_of(int fd, bool peer) {
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    int r = peer ? getpeername(fd, reinterpret_cast<sockaddr *>(&ss), &sl)
                 : getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &sl);
    if (r != 0) return "";
    char buf[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in &>(ss).sin_addr, buf, sizeof buf);
    } else if (ss.ss_family == AF_INET6) {
        auto &in6 = reinterpret_cast<sockaddr_in6 &>(ss);
        if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr))
            inet_ntop(AF_INET, in6.sin6_addr.s6_addr + 12, buf, sizeof buf);
        else
            inet_ntop(AF_INET6, &in6.sin6_addr, buf, sizeof buf);
    }
    return buf;
}

// Where the rendezvous of a token lives, and the device that reaches it from `fd`'s end.
vipl::Uri rendezvous(Provider p, const uint8_t token[16], int fd, bool server,
                     std::string *device) {
    vipl::Uri u;
    u.service = hex(token, 16);
    if (p == Provider::shm) {
        u.transport = vipl::Transport::shm;
        u.host = "localhost";
        device->clear();
    } else {
        u.transport = vipl::Transport::tcp;
        std::string local = ip_of(fd, false);
        u.host = server ? local : ip_of(fd, true);
        *device = "tcp:" + local;
    }
    return u;
}

void set_state(Sock *s, SockState st) {
    // Negotiating, pre_bytes counts the program's bytes that went on the kernel
    // connection; decided for the kernel, every byte is the kernel's (a plain socket with
    // pre_bytes reads a hand-over's kernel part first: handover.h).
    if (st == SockState::plain) s->pre_bytes = 0;
    s->state = st;
    if (s->stat && st == SockState::vipl)
        s->stat->transport = static_cast<uint8_t>(
            s->provider == Provider::shm ? StatTransport::shm : StatTransport::tcp);
    epoll_sock_changed(s);
}

void go_plain(Sock *s, int fd, const char *why) {
    if (why) VIPL_DB_WARN("fd %d stays on the kernel: %s", fd, why);
    set_state(s, SockState::plain);
}

} // namespace

void give_up_rendezvous(Sock *s, int fd, const char *why) noexcept {
    go_plain(s, fd, why);
    s->rendezvous = vipl::Listener();
}

namespace {

// Holds the calling thread's asynchronous signals while it lives (faults stay open).
class HoldSignals {
public:
    HoldSignals() noexcept {
        sigset_t all;
        sigfillset(&all);
        for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&all, sig);
        pthread_sigmask(SIG_BLOCK, &all, &old_);
    }
    ~HoldSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
    HoldSignals(const HoldSignals &) = delete;
    HoldSignals &operator=(const HoldSignals &) = delete;

private:
    sigset_t old_;
};

// Connects the client's stream to the server's rendezvous and proves who we are.
bool client_connect(Sock *s, int fd) {
    std::string device;
    vipl::Uri u = rendezvous(s->provider, s->hello.token, fd, false, &device);
    vipl::StreamOptions o = stream_options(s->family);
    o.device = device;
    Deadline dl = step_deadline();
    std::error_code ec;
    vipl::Stream st;
    // From the request until the prologue is written no handler of the program may run
    // here: the server waits for our part of the handshake, and a handler that connects
    // to that same server (psql's PQcancel) would wait for a server waiting for us.  The
    // signals are held for that round trip, then delivered (none is lost or added).
    HoldSignals held;
    for (;;) {
        st = vipl::Stream::connect(u, dl, ec, o);
        if (ec != std::errc::interrupted || Clock::now() >= dl) break;
    }
    if (ec) {
        VIPL_DB_WARN("fd %d: stream to %s: %s", fd, u.to_string().c_str(), ec.message().c_str());
        return false;
    }
    // The stream's first bytes: the secret, then how many bytes the program wrote on the
    // kernel connection before (the server reads those there first).
    uint8_t prologue[kPrologueSize];
    encode_prologue(s->hello.secret, s->pre_bytes, prologue);
    auto rest = std::as_bytes(std::span(prologue));
    size_t done = 0;
    while (done < rest.size() && !ec) {
        done += st.write(rest.subspan(done), dl, ec);
        if (ec == std::errc::interrupted) ec.clear();
    }
    if (done < rest.size()) {
        st.abort();
        return false;
    }
    s->stream = std::move(st);
    return true;
}

// A REPLY (or what stands in its place) is at the head of the connection.
bool client_decide(Sock *s, int fd, const uint8_t *buf, ssize_t n) {
    Reply r;
    Parse p = parse_reply({buf, static_cast<size_t>(n)}, &r);
    if (p == Parse::need_more) return false;
    if (p == Parse::not_ours) {
        go_plain(s, fd, "the server wrote first");
        return true;
    }
    kdrop(fd, kReplySize);
    if (p == Parse::bad) {
        go_plain(s, fd, "malformed reply");
        return true;
    }
    if (r.status == Status::one_cpu) one_cpu_remember(s->server_tag, s->hello);
    if (r.status != Status::ok) {
        go_plain(s, fd,
                 r.status == Status::bad_version ? "server speaks another version"
                 : r.status == Status::one_cpu   ? "client and server run on one CPU only"
                                                 : "server declined");
        return true;
    }
    s->provider = r.provider;
    if (!client_connect(s, fd)) {
        go_plain(s, fd, "could not reach the server's rendezvous");
        return true;
    }
    s->pre_bytes = 0;
    set_state(s, SockState::vipl);
    VIPL_DB_INFO("fd %d rides vipl (%s)", fd, r.provider == Provider::shm ? "shm" : "tcp");
    return true;
}

} // namespace

vipl::StreamOptions stream_options(int family) {
    const Config &c = config();
    vipl::StreamOptions o;
    o.recv_buffers = c.recv_buffers;
    o.send_buffers = c.send_buffers;
    o.inline_sends = c.inline_sends;
    o.buffer_size = c.buffer_size;
    o.spin_us = c.spin_us;
    o.linger = std::chrono::milliseconds(c.linger_ms);
    o.shareable = true;
    o.ready_fd = false;
    // What send() took is on its way without another call, as a socket's is.
    o.hold_back = false;
    // A unix socket's send() fails at once after the peer closed; a TCP one's does not
    // (and needs no look at what arrived, a recv() per message on the tcp provider).
    o.write_looks = family == AF_UNIX;
    return o;
}

bool client_look(Sock *s, int fd) noexcept {
    uint8_t buf[kReplySize];
    ssize_t n = kpeek(fd, buf, sizeof buf);
    if (n < 0) {
        if (errno == EAGAIN) return false;
        go_plain(s, fd, "the connection failed during the negotiation");
        return true;
    }
    if (n == 0) {
        go_plain(s, fd, "the server closed before answering");
        return true;
    }
    if (client_decide(s, fd, buf, n)) return true;
    // Part of a REPLY: the rest follows at once from a live server.
    Deadline dl = step_deadline();
    while (Clock::now() < dl) {
        int r = kwait(fd, POLLIN, dl);
        if (r < 0 && errno == EINTR) continue;
        n = kpeek(fd, buf, sizeof buf);
        if (n <= 0 && !(n < 0 && errno == EAGAIN)) break;
        if (n > 0 && client_decide(s, fd, buf, n)) return true;
    }
    client_give_up(s, fd);
    return true;
}

void client_give_up(Sock *s, int fd) noexcept {
    VIPL_DB_WARN("fd %d: no answer to the hello in time; staying on the kernel", fd);
    set_state(s, SockState::strip_reply);
}

namespace {

// The server's side of a HELLO it just took: a rendezvous, the REPLY, the stream.
// The server's side of a HELLO it just took: a rendezvous and the REPLY.  The client's
// stream arrives when it has read the REPLY; meanwhile its bytes keep coming on the
// kernel connection, which the program reads as usual (accept_step ends the wait).
void serve(Sock *s, int fd, const Hello &h) {
    Reply r;
    r.provider = h.provider;
    r.status = Status::plain;
    std::string device;
    vipl::Uri u = rendezvous(h.provider, h.token, fd, true, &device);
    vipl::StreamOptions o = stream_options(s->family);
    o.device = device;
    vipl::Listener l;
    std::error_code ec;
    if (placement_kernel(h)) {
        VIPL_DB_INFO("fd %d: client and server run on CPU %u only, in two scheduling groups: "
                     "the kernel socket",
                     fd, h.cpu - 1);
        r.status = Status::one_cpu;
    } else if (h.provider == Provider::shm && !same_host(fd)) {
        VIPL_DB_WARN("fd %d: a shm hello from another host", fd);
    } else {
        l = vipl::Listener::bind(u, ec, o);
        if (ec)
            VIPL_DB_WARN("fd %d: rendezvous %s: %s", fd, u.to_string().c_str(),
                         ec.message().c_str());
        else
            r.status = Status::ok;
    }
    r.buffer_size = h.buffer_size;
    uint8_t msg[kReplySize];
    encode_reply(r, msg);
    if (!ksend_all(fd, msg, sizeof msg, step_deadline(), nullptr) || r.status != Status::ok) {
        go_plain(s, fd, r.status == Status::ok ? "could not answer the hello" : nullptr);
        return;
    }
    s->provider = h.provider;
    s->hello = h;
    s->rendezvous = std::move(l);
    // The client's own wait for the stream is one step; ours is two, so that a client
    // that gave up never finds us still accepting.
    s->rendezvous_until = step_deadline(2);
    s->pre_bytes = 0;
    set_state(s, SockState::accepting);
}

} // namespace

bool server_look(Sock *s, int fd, bool writing) noexcept {
    uint8_t buf[kHelloSize];
    ssize_t n = kpeek(fd, buf, sizeof buf);
    if (n < 0 && errno == EAGAIN) {
        if (!writing) return false;
        set_state(s, SockState::strip_hello);
        return true;
    }
    if (n <= 0) {
        go_plain(s, fd, nullptr);
        return true;
    }
    Hello h;
    Parse p = parse_hello({buf, static_cast<size_t>(n)}, &h);
    if (p == Parse::need_more) {
        // A client writes its HELLO in one piece: the rest of a short one is on its way,
        // or never comes (a port scanner, a truncated client: the program gets the bytes).
        Deadline dl = Clock::now() + std::chrono::milliseconds(200);
        while (p == Parse::need_more && Clock::now() < dl) {
            int r = kwait(fd, POLLIN, dl);
            if (r < 0 && errno == EINTR) continue;
            ssize_t m = kpeek(fd, buf, sizeof buf);
            if (m <= n) {
                if (r == 0) break;
                if (m <= 0) break;
                continue;
            }
            n = m;
            p = parse_hello({buf, static_cast<size_t>(n)}, &h);
        }
        if (p == Parse::need_more) p = Parse::not_ours;
    }
    if (p != Parse::ok) {
        go_plain(s, fd, p == Parse::bad ? "malformed hello (left to the program)" : nullptr);
        return true;
    }
    kdrop(fd, kHelloSize);
    if (!config().enable) {
        go_plain(s, fd, nullptr);
        return true;
    }
    serve(s, fd, h);
    return true;
}

bool accept_step(Sock *s, int fd, Deadline wait) noexcept {
    if (Clock::now() >= s->rendezvous_until) {
        give_up_rendezvous(s, fd, "the client did not come to the rendezvous");
        return true;
    }
    if (wait > s->rendezvous_until) wait = s->rendezvous_until;
    for (;;) {
        std::error_code ec;
        vipl::Stream st = s->rendezvous.accept(wait, ec);
        if (ec == std::errc::interrupted && Clock::now() < wait) continue;
        if (ec == std::errc::timed_out || ec == std::errc::interrupted) {
            if (Clock::now() < s->rendezvous_until) return false;
            give_up_rendezvous(s, fd, "the client did not come to the rendezvous");
            return true;
        }
        if (ec) {
            give_up_rendezvous(s, fd, "the rendezvous failed");
            return true;
        }
        // The client writes its prologue right after connecting.
        Deadline dl = s->rendezvous_until;
        uint8_t prologue[kPrologueSize];
        size_t got = 0;
        std::error_code rec;
        while (got < sizeof prologue) {
            size_t n = st.read(std::as_writable_bytes(std::span(prologue)).subspan(got), dl, rec);
            if (rec == std::errc::interrupted) {
                rec.clear();
                continue;
            }
            if (rec || n == 0) break;
            got += n;
        }
        uint64_t before = 0;
        if (got == sizeof prologue && decode_prologue(prologue, s->hello.secret, &before) &&
            before >= s->pre_bytes) {
            // pre_bytes counted what the program read on the kernel connection so far.
            s->stream = std::move(st);
            s->pre_bytes = before - s->pre_bytes;
            set_state(s, SockState::vipl); // registrations leave the listener first
            s->rendezvous = vipl::Listener();
            VIPL_DB_INFO("fd %d rides vipl (%s)", fd, s->provider == Provider::shm ? "shm" : "tcp");
            return true;
        }
        VIPL_DB_WARN("fd %d: a stream to the rendezvous did not prove the hello's secret", fd);
        st.abort();
    }
}

bool strip_look(Sock *s, int fd) noexcept {
    bool hello = s->state == SockState::strip_hello;
    size_t size = hello ? kHelloSize : kReplySize;
    uint8_t buf[kHelloSize];
    ssize_t n = kpeek(fd, buf, size);
    if (n < 0 && errno == EAGAIN) return false;
    if (n > 0) {
        Hello h;
        Reply r;
        std::span<const uint8_t> in(buf, static_cast<size_t>(n));
        Parse p = hello ? parse_hello(in, &h) : parse_reply(in, &r);
        if (p == Parse::need_more && static_cast<size_t>(n) < size) {
            // Wait for the rest briefly, as server_look does.
            Deadline dl = Clock::now() + std::chrono::milliseconds(200);
            while (Clock::now() < dl) {
                int w = kwait(fd, POLLIN, dl);
                if (w < 0 && errno == EINTR) continue;
                ssize_t m = kpeek(fd, buf, size);
                if (m <= n) {
                    if (w == 0 || m <= 0) break;
                    continue;
                }
                n = m;
                in = {buf, static_cast<size_t>(n)};
                p = hello ? parse_hello(in, &h) : parse_reply(in, &r);
                if (p != Parse::need_more) break;
            }
        }
        if (p == Parse::ok || p == Parse::bad) kdrop(fd, size);
    }
    set_state(s, SockState::plain);
    return true;
}

} // namespace vipl::db

namespace vipl::db {

void client_connected(Sock *s, int fd) noexcept {
    Provider route;
    const char *why = nullptr;
    std::string name; // the server's marker: what the one-CPU memo knows it by
    if (s->family == AF_UNIX) {
        std::string wild;
        name = marker_probe_names(reinterpret_cast<sockaddr *>(&s->dest), s->dest_len, &wild);
        if (!marker_exists(name)) why = "";
        route = Provider::shm;
    } else if (same_host(fd)) {
        sockaddr_storage peer{};
        socklen_t pl = sizeof peer;
        getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &pl);
        std::string wild;
        name = marker_probe_names(reinterpret_cast<sockaddr *>(&peer), pl, &wild);
        if (!marker_exists(name) && !marker_exists(wild)) why = "";
        route = Provider::shm;
    } else if (s->remote_rule) {
        route = Provider::tcp;
    } else {
        why = "";
    }
    if (!why) {
        Hello &h = s->hello;
        h.provider = route;
        h.buffer_size = config().buffer_size;
        placement_say(&h);
        s->server_tag = fnv1a(name.data(), name.size());
        uint64_t age_ms = 0;
        if (one_cpu_recalls(s->server_tag, h, &age_ms)) {
            // No HELLO: the server takes the connection for a plain client's.
            VIPL_DB_INFO("fd %d stays on the kernel: client and server run on one CPU only "
                         "(the server said so %llu ms ago)",
                         fd, static_cast<unsigned long long>(age_ms));
            set_state(s, SockState::plain);
            return;
        }
        if (!random_bytes(h.token, sizeof h.token) || !random_bytes(h.secret, sizeof h.secret)) {
            why = "no random bytes for the hello";
        } else {
            uint8_t msg[kHelloSize];
            encode_hello(h, msg);
            size_t sent = 0;
            if (ksend_all(fd, msg, sizeof msg, step_deadline(), &sent)) {
                s->provider = route;
                set_state(s, SockState::hello_sent);
                return;
            }
            if (sent > 0) {
                // Half a hello in the stream: the server drops what it cannot read as one.
                VIPL_DB_ERROR("fd %d: could not send the whole hello", fd);
            }
            why = "could not send the hello";
        }
    }
    go_plain(s, fd, *why ? why : nullptr);
}

} // namespace vipl::db
