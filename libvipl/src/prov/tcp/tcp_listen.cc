// Where connections arrive: one listening socket per port (Boost.Asio
// acceptor set-up), the Hellos of accepted connections, and the hand-over of
// a connection that reached this process for a discriminator another
// process serves on the same port.
#include "core/clock.h"
#include "core/config.h"
#include "core/fds.h"
#include "core/log.h"
#include "prov/tcp/tcp.h"
#include "prov/util/unix_socket.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/un.h>
#include <unistd.h>

namespace vipl::tcp {
namespace {

namespace asio = boost::asio;
using ReusePort = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

constexpr size_t kMaxIncoming = 1024;

asio::ip::address nic_address(const TcpNic *t) {
    if (t->family == AF_INET) {
        auto *s = reinterpret_cast<const sockaddr_in *>(&t->local);
        asio::ip::address_v4::bytes_type b;
        memcpy(b.data(), &s->sin_addr, 4);
        return asio::ip::address_v4(b);
    }
    auto *s = reinterpret_cast<const sockaddr_in6 *>(&t->local);
    asio::ip::address_v6::bytes_type b;
    memcpy(b.data(), &s->sin6_addr, 16);
    return asio::ip::address_v6(b, s->sin6_scope_id);
}

// A listening socket bound to the NIC's address: close-on-exec and
// non-blocking from birth, then configured through an Asio acceptor.
int open_listener(const TcpNic *t, uint16_t port, int *err) {
    int fd = fd_track(socket(t->family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    boost::system::error_code ec;
    asio::io_context io;
    asio::ip::tcp::acceptor acc(io);
    acc.assign(t->family == AF_INET ? asio::ip::tcp::v4() : asio::ip::tcp::v6(), fd, ec);
    if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acc.set_option(ReusePort(true), ec);
    if (!ec) size_receive_buffer(fd); // accepted sockets inherit it
    if (!ec && t->family == AF_INET6) acc.set_option(asio::ip::v6_only(true), ec);
    if (!ec) acc.bind(asio::ip::tcp::endpoint(nic_address(t), port), ec);
    if (!ec) acc.listen(512, ec);
    boost::system::error_code ignored;
    acc.release(ignored);
    if (ec) {
        *err = ec.value();
        fd_close(fd);
        return -1;
    }
    return fd;
}

// The hand-over socket's abstract name: NIC address, port, discriminator.
std::string handover_name(const TcpNic *t, uint16_t port, const uint8_t *disc, uint16_t len) {
    static const char hex[] = "0123456789abcdef";
    std::string n = "vipl-tcp:";
    const uint8_t *a = t->family == AF_INET
                           ? reinterpret_cast<const uint8_t *>(
                                 &reinterpret_cast<const sockaddr_in *>(&t->local)->sin_addr)
                           : reinterpret_cast<const uint8_t *>(
                                 &reinterpret_cast<const sockaddr_in6 *>(&t->local)->sin6_addr);
    for (int i = 0; i < (t->family == AF_INET ? 4 : 16); ++i) {
        n += hex[a[i] >> 4];
        n += hex[a[i] & 15];
    }
    n += ":" + std::to_string(port) + ":";
    if (len <= 24) {
        for (int i = 0; i < len; ++i) {
            n += hex[disc[i] >> 4];
            n += hex[disc[i] & 15];
        }
    } else { // too long for a socket name: a hash (the Hello is checked on arrival anyway)
        uint64_t h = 14695981039346656037ull;
        for (int i = 0; i < len; ++i) h = (h ^ disc[i]) * 1099511628211ull;
        for (int i = 0; i < 16; ++i) n += hex[(h >> (60 - 4 * i)) & 15];
        n += "/" + std::to_string(len);
    }
    return n;
}

bool same(const uint8_t *a, uint16_t alen, const uint8_t *b, uint16_t blen) {
    return alen == blen && memcmp(a, b, alen) == 0;
}

bool same_disc(const Served &s, const uint8_t *disc, uint16_t len) {
    return same(reinterpret_cast<const uint8_t *>(s.disc.data()),
                static_cast<uint16_t>(s.disc.size()), disc, len);
}

// Whoever serves disc on l, or nullptr.
Served *served_by(Listener *l, const uint8_t *disc, uint16_t len) {
    for (Served &s : l->served)
        if (same_disc(s, disc, len)) return &s;
    return nullptr;
}

// An incoming connection whose Hello is arriving wakes the wait descriptors
// (through l->arrivals, once made); a complete or dropped one no longer does.
void watch(Listener *l, Incoming *in, bool add) {
    if (l->arrivals < 0 || in->watched == add) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (epoll_ctl(l->arrivals, add ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, in->fd, &ev) == 0 || !add)
        in->watched = add;
}

// Sets each wait descriptor's eventfd while a complete request for its
// discriminator waits here, and clears it once none does, so that a request
// meant for another discriminator leaves it quiet.
void update_ready(Listener *l) {
    for (Served &s : l->served) {
        if (s.ready_fd < 0) continue;
        bool want = false;
        for (const Incoming *in : l->incoming)
            if (in->got == kHelloWire && in->hello.type == kHelloRequest &&
                same_disc(s, in->hello.want, in->hello.want_len)) {
                want = true;
                break;
            }
        if (want == s.ready) continue;
        uint64_t v = 1;
        [[maybe_unused]] ssize_t n =
            want ? write(s.ready_fd, &v, sizeof v) : read(s.ready_fd, &v, sizeof v);
        s.ready = want;
    }
}

void close_served(Served &s) {
    for (int *fd : {&s.fd, &s.wait_fd, &s.ready_fd}) {
        if (*fd >= 0) fd_close(*fd);
        *fd = -1;
    }
}

void reject(int fd, VIP_RETURN reason) {
    Hello r{};
    r.type = kHelloReject;
    r.reason = reason;
    send_hello(fd, r, now_ns() + 100000000ull);
}

// Passes a connection whose Hello asks for a discriminator this process does
// not serve to the process that does; false if none does.
bool hand_over(Nic *nic, Listener *l, Incoming *in) {
    std::string name = handover_name(tcp_nic(nic), l->port, in->hello.want, in->hello.want_len);
    int s = util::seqpacket_socket();
    if (s < 0) return false;
    sockaddr_un sa;
    socklen_t sl = util::abstract_address(name, &sa);
    bool ok = sl != 0 && connect(s, reinterpret_cast<sockaddr *>(&sa), sl) == 0 &&
              util::send_with_fds(s, in->buf, kHelloWire, &in->fd, 1);
    fd_close(s);
    return ok;
}

// The message on a hand-over connection (in->fd, accepted from a Served
// socket): the Hello and the TCP connection's descriptor, which then takes
// the hand-over connection's place.  1 once it came, 0 not yet, -1 failed.
// Never waits: the sender writes right after connecting, and a wait for it
// would be a sleep in a zero-timeout VipConnectWait.
int receive_handover(Listener *l, Incoming *in) {
    uint8_t buf[kHelloWire];
    int tcp = -1, nfds = 0;
    util::Recv r = util::recv_with_fds(in->fd, buf, kHelloWire, &tcp, 1, &nfds);
    if (r == util::Recv::again) return 0;
    if (nfds == 0) tcp = -1;
    Hello h{};
    if (r != util::Recv::ok || tcp < 0 || !decode_hello(buf, &h)) {
        if (tcp >= 0) fd_close(tcp);
        return -1;
    }
    watch(l, in, false);
    fd_close(in->fd);
    in->fd = tcp;
    in->handover = false;
    memcpy(in->buf, buf, kHelloWire);
    in->hello = h;
    in->got = kHelloWire;
    return 1;
}

void remove_at(Listener *l, size_t i) {
    l->incoming[i] = l->incoming.back();
    l->incoming.pop_back();
}

// Accepts, reads and sorts what arrived (NIC lock held, never blocks long).
void pump(Nic *nic, Listener *l) {
    for (int i = 0; i < 64 && l->incoming.size() < kMaxIncoming; ++i) {
        int fd = fd_track(accept4(l->fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (fd < 0) break;
        auto *in = new Incoming;
        in->fd = fd;
        in->deadline = now_ns() + vipl::config().connect_ack_ms * 1000000ull;
        l->incoming.push_back(in);
        watch(l, in, true);
    }
    for (Served &s : l->served)
        for (int i = 0; i < 16 && l->incoming.size() < kMaxIncoming; ++i) {
            int conn = fd_track(accept4(s.fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
            if (conn < 0) break;
            auto *in = new Incoming;
            in->fd = conn;
            in->handover = true;
            in->deadline = now_ns() + 100000000ull; // the sender writes at once: 100 ms is plenty
            l->incoming.push_back(in);
            watch(l, in, true);
        }
    uint64_t now = now_ns();
    for (size_t i = 0; i < l->incoming.size();) {
        Incoming *in = l->incoming[i];
        bool drop = false;
        if (in->handover) {
            int r = receive_handover(l, in);
            drop = r < 0 || (r == 0 && now >= in->deadline);
        } else if (in->got < kHelloWire) {
            ssize_t n = recv(in->fd, in->buf + in->got, kHelloWire - in->got, MSG_DONTWAIT);
            if (n > 0) in->got += static_cast<uint32_t>(n);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) drop = true;
            if (in->got < kHelloWire) {
                drop |= now >= in->deadline;
            } else if (!decode_hello(in->buf, &in->hello) ||
                       (in->hello.type != kHelloRequest && in->hello.type != kHelloPeerRequest)) {
                VIPL_INFO("tcp: dropping a connection whose handshake is malformed");
                drop = true;
            } else if (!served_by(l, in->hello.want, in->hello.want_len)) {
                if (!hand_over(nic, l, in)) reject(in->fd, VIP_NO_MATCH);
                drop = true;
            }
        } else {
            // Waiting for a taker: forget it if the requester gave up.
            uint8_t c;
            ssize_t n = recv(in->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
            drop = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
        }
        if (drop || in->got == kHelloWire) watch(l, in, false);
        if (drop) {
            remove_at(l, i);
            incoming_free(in);
        } else {
            ++i;
        }
    }
}

// The process's listeners.  A fork child starts with none: the parent's
// sockets are not its own (the core closes the child's copies).
struct Listening {
    Mutex lock;
    std::vector<Listener *> all;
};

Listening &listening() {
    static Listening *l = [] {
        auto *made = new Listening;
        pthread_atfork([] { listening().lock.lock(); }, [] { listening().lock.unlock(); },
                       [] {
                           listening().all.clear();
                           listening().lock.unlock();
                       });
        return made;
    }();
    return *l;
}

std::vector<Listener *> &all_listeners() {
    return listening().all;
}

} // namespace

Mutex &listen_lock() {
    return listening().lock;
}

Listener *listener_for(Nic *nic, uint16_t port, VIP_RETURN *rc) {
    TcpNic *t = tcp_nic(nic);
    for (Listener *l : t->listeners)
        if (l->port == port) return l;
    for (Listener *l : all_listeners())
        if (l->port == port && l->local_len == t->local_len &&
            memcmp(&l->local, &t->local, t->local_len) == 0) {
            ++l->refs;
            t->listeners.push_back(l);
            return l;
        }
    int err = 0;
    int fd = open_listener(t, port, &err);
    if (fd < 0) {
        // A port another program holds cannot serve the discriminator, as when
        // another process serves it: the caller hears VIP_ERROR_RESOURCE and may try
        // again, so that is a warning; any other failure is the library's error.
        if (err == EADDRINUSE)
            VIPL_WARN("tcp: port %u on %s is another program's", port, t->ifname.c_str());
        else
            VIPL_ERROR("tcp: cannot listen on %s port %u: %s", t->ifname.c_str(), port,
                       strerror(err));
        *rc = err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS || err == EADDRINUSE
                  ? VIP_ERROR_RESOURCE
                  : VIP_INVALID_PARAMETER;
        return nullptr;
    }
    auto *l = new Listener;
    l->port = port;
    l->fd = fd;
    l->local = t->local;
    l->local_len = t->local_len;
    l->refs = 1;
    all_listeners().push_back(l);
    t->listeners.push_back(l);
    return l;
}

VIP_RETURN serve(Nic *nic, Listener *l, const uint8_t *disc, uint16_t len) {
    // One server per discriminator, as across processes: another NIC of this
    // address that serves it keeps it.
    if (const Served *s = served_by(l, disc, len)) {
        if (s->nic == tcp_nic(nic)) return VIP_SUCCESS;
        VIPL_WARN("tcp: discriminator on port %u is already served by another NIC", l->port);
        return VIP_ERROR_RESOURCE;
    }
    std::string name = handover_name(tcp_nic(nic), l->port, disc, len);
    int fd = util::seqpacket_socket();
    if (fd < 0) return VIP_ERROR_RESOURCE;
    sockaddr_un sa;
    socklen_t sl = util::abstract_address(name, &sa);
    if (sl == 0 || bind(fd, reinterpret_cast<sockaddr *>(&sa), sl) < 0 || listen(fd, 64) < 0) {
        int err = errno;
        fd_close(fd);
        if (err == EADDRINUSE) {
            VIPL_WARN("tcp: discriminator on port %u is already served by another process",
                      l->port);
            return VIP_ERROR_RESOURCE;
        }
        return VIP_ERROR_RESOURCE;
    }
    l->served.push_back(
        Served{std::string(reinterpret_cast<const char *>(disc), len), fd, tcp_nic(nic)});
    return VIP_SUCCESS;
}

Incoming *take_incoming(Nic *nic, Listener *l, uint32_t type, const uint8_t *disc, uint16_t len,
                        const uint8_t *from, uint16_t from_len) {
    pump(nic, l);
    for (size_t i = 0; i < l->incoming.size(); ++i) {
        Incoming *in = l->incoming[i];
        const Hello &h = in->hello;
        if (in->got < kHelloWire || h.type != type || !same(h.want, h.want_len, disc, len))
            continue;
        if (from && !same(h.disc, h.disc_len, from, from_len)) continue;
        remove_at(l, i);
        update_ready(l);
        return in;
    }
    update_ready(l);
    return nullptr;
}

int incoming_fds(Nic *, Listener *l, pollfd *fds, int max, uint64_t *deadline) {
    int n = 0;
    if (n < max) fds[n++] = pollfd{l->fd, POLLIN, 0};
    for (const Served &s : l->served)
        if (n < max) fds[n++] = pollfd{s.fd, POLLIN, 0};
    for (const Incoming *in : l->incoming) {
        if (in->got == kHelloWire) continue;
        if (in->deadline < *deadline) *deadline = in->deadline;
        if (n < max) fds[n++] = pollfd{in->fd, POLLIN, 0};
    }
    return n;
}

VIP_RETURN request_wait_fd(Nic *nic, Listener *l, const uint8_t *disc, uint16_t len, int *fd) {
    Served *s = served_by(l, disc, len);
    if (!s || s->nic != tcp_nic(nic)) return VIP_ERROR_RESOURCE;
    if (s->wait_fd >= 0) {
        *fd = s->wait_fd;
        return VIP_SUCCESS;
    }
    epoll_event ev{};
    ev.events = EPOLLIN; // level-triggered: readable while something is there to take
    if (l->arrivals < 0) {
        int ep = fd_track(epoll_create1(EPOLL_CLOEXEC));
        if (ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, l->fd, &ev) != 0) {
            fd_close(ep);
            ep = -1;
        }
        if (ep < 0) {
            VIPL_ERROR("VipGetConnWaitFd: %s", strerror(errno));
            return VIP_ERROR_RESOURCE;
        }
        l->arrivals = ep;
        for (Incoming *in : l->incoming)
            if (in->got < kHelloWire) watch(l, in, true);
    }
    // One set per discriminator: new connections and Hellos arriving on the
    // port (whoever they are for: pumping sorts them), connections another
    // process hands over for this discriminator, and complete requests for it.
    int ready = fd_track(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    int ep = fd_track(epoll_create1(EPOLL_CLOEXEC));
    bool ok = ready >= 0 && ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, l->arrivals, &ev) == 0 &&
              epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev) == 0 &&
              epoll_ctl(ep, EPOLL_CTL_ADD, ready, &ev) == 0;
    if (!ok) {
        VIPL_ERROR("VipGetConnWaitFd: %s", strerror(errno));
        if (ready >= 0) fd_close(ready);
        if (ep >= 0) fd_close(ep);
        return VIP_ERROR_RESOURCE;
    }
    s->wait_fd = ep;
    s->ready_fd = ready;
    s->ready = false;
    update_ready(l);
    *fd = ep;
    return VIP_SUCCESS;
}

void incoming_free(Incoming *in) {
    if (!in) return;
    if (in->fd >= 0) fd_close(in->fd);
    delete in;
}

void listeners_close(TcpNic *t) {
    std::lock_guard<Mutex> g(listen_lock());
    for (Listener *l : t->listeners) {
        // What this NIC served is served no more; the socket goes with its last NIC.
        for (size_t i = 0; i < l->served.size();) {
            if (l->served[i].nic != t) {
                ++i;
                continue;
            }
            close_served(l->served[i]);
            l->served.erase(l->served.begin() + static_cast<ptrdiff_t>(i));
        }
        if (--l->refs > 0) continue;
        std::vector<Listener *> &all = all_listeners();
        all.erase(std::find(all.begin(), all.end(), l));
        fd_close(l->fd);
        if (l->arrivals >= 0) fd_close(l->arrivals);
        for (Served &s : l->served) close_served(s);
        for (Incoming *in : l->incoming) incoming_free(in);
        delete l;
    }
    t->listeners.clear();
}

} // namespace vipl::tcp
