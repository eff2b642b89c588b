// Connection set-up over TCP.
//
//   requester                               acceptor
//   connect, Hello Request (attributes) ->
//                                        <- Hello Accept (attributes) | Reject (reason)
//   Hello Ack ->
//   ... frames both ways
//
// Peer-to-peer: the side with the larger (address, discriminator) listens,
// the other connects and sends a PeerRequest until the deadline.
//
// Sockets are made close-on-exec and non-blocking, then bound and
// configured through Boost.Asio; connect and the handshake wait with the
// library's interruptible waits (Asio's synchronous calls can neither take a
// deadline nor report a signal handler's run).
#include "core/clock.h"
#include "core/config.h"
#include "core/fds.h"
#include "core/log.h"
#include "core/wait.h"
#include "prov/tcp/tcp.h"
#include "prov/util/endpoint.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cerrno>
#include <cstring>
#include <memory>
#include <unistd.h>

namespace vipl::tcp {

struct P2p {
    bool acceptor = false;
    uint16_t port = 0;
    int sock = -1; // connector: the connection being made
    bool connected = false;
    uint32_t sent = 0, got = 0;
    uint8_t out[kHelloWire], in[kHelloWire];
    uint64_t deadline = 0;
    uint64_t next_try = 0;
    Hello hello{}; // what this side sends
    sockaddr_storage remote{};
    socklen_t remote_len = 0;

    P2p() = default;
    P2p(const P2p &) = delete;
    ~P2p() {
        if (sock >= 0) fd_close(sock);
    }
};

namespace {

namespace asio = boost::asio;

VIP_RETURN check_match(const Vi *vi, const Hello &h) {
    if (vi->attrs.ReliabilityLevel != h.reliability) return VIP_INVALID_RELIABILITY_LEVEL;
    if (vi->attrs.MaxTransferSize != h.mtu) return VIP_INVALID_MTU;
    return VIP_SUCCESS;
}

void fill_attrs(const Hello &h, VIP_VI_ATTRIBUTES *out) {
    *out = VIP_VI_ATTRIBUTES{};
    out->ReliabilityLevel = static_cast<VIP_RELIABILITY_LEVEL>(h.reliability);
    out->MaxTransferSize = h.mtu;
    out->EnableRdmaWrite = (h.rdma & 1) ? VIP_TRUE : VIP_FALSE;
    out->EnableRdmaRead = (h.rdma & 2) ? VIP_TRUE : VIP_FALSE;
}

const uint8_t *disc_of(const VIP_NET_ADDRESS *a) {
    return a->HostAddress + a->HostAddressLen;
}

bool local_ok(const Nic *nic, const VIP_NET_ADDRESS *local) {
    return local->HostAddressLen == 0 ||
           (local->HostAddressLen == nic->attrs.NicAddressLen &&
            memcmp(local->HostAddress, nic->address, local->HostAddressLen) == 0);
}

// A socket bound to the NIC's address, connecting to `to` (non-blocking):
// the descriptor, or -1 with *err set.
int start_connect(const Nic *nic, const sockaddr_storage &to, socklen_t tolen, int *err) {
    const TcpNic *t = static_cast<const TcpNic *>(nic->prov);
    int fd = fd_track(socket(t->family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    boost::system::error_code ec;
    {
        asio::io_context io;
        asio::ip::tcp::socket s(io);
        s.assign(t->family == AF_INET ? asio::ip::tcp::v4() : asio::ip::tcp::v6(), fd, ec);
        if (!ec) s.set_option(asio::ip::tcp::no_delay(true), ec);
        if (!ec) size_receive_buffer(fd);
        if (!ec) {
            asio::ip::tcp::endpoint here;
            here.resize(t->local_len);
            memcpy(here.data(), &t->local, t->local_len);
            s.bind(here, ec);
        }
        boost::system::error_code ignored;
        s.release(ignored);
    }
    if (ec) {
        *err = ec.value();
        fd_close(fd);
        return -1;
    }
    if (connect(fd, reinterpret_cast<const sockaddr *>(&to), tolen) < 0 && errno != EINPROGRESS) {
        *err = errno;
        fd_close(fd);
        return -1;
    }
    *err = 0;
    return fd;
}

VIP_RETURN connect_error(int err) {
    switch (err) {
    case ECONNREFUSED:
        return VIP_NO_MATCH;
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ENETDOWN:
    case EHOSTDOWN:
    case EADDRNOTAVAIL:
        return VIP_NOT_REACHABLE;
    case ETIMEDOUT:
        return VIP_TIMEOUT;
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
        return VIP_ERROR_RESOURCE;
    default:
        return VIP_REJECT;
    }
}

// Waits for a non-blocking connect to finish.
VIP_RETURN finish_connect(int fd, uint64_t deadline) {
    pollfd p{fd, POLLOUT, 0};
    switch (poll_until(&p, 1, deadline)) {
    case PollResult::ready:
        break;
    case PollResult::timeout:
        return VIP_TIMEOUT;
    case PollResult::interrupted:
        return VIP_INTERRUPTED;
    case PollResult::error:
        return VIP_ERROR_RESOURCE;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    return err ? connect_error(err) : VIP_SUCCESS;
}

// Moves bytes of a handshake record without blocking: true when all moved.
bool move(int fd, uint8_t *buf, uint32_t *done, bool out, bool *failed) {
    while (*done < kHelloWire) {
        ssize_t n = out ? send(fd, buf + *done, kHelloWire - *done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, buf + *done, kHelloWire - *done, MSG_DONTWAIT);
        if (n > 0) {
            *done += static_cast<uint32_t>(n);
            continue;
        }
        if (n < 0 && (errno == EINTR)) continue;
        *failed = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
        return false;
    }
    return true;
}

// An interruptible wait ends when a signal handler runs; the others go on
// (the last step of a handshake, which both sides must see end the same way).
VIP_RETURN move_by(int fd, uint8_t *buf, bool out, uint64_t deadline, bool interruptible) {
    uint32_t done = 0;
    for (;;) {
        bool failed = false;
        int saved = errno;
        bool all = move(fd, buf, &done, out, &failed);
        errno = saved;
        if (all) return VIP_SUCCESS;
        if (failed) return VIP_REJECT;
        pollfd p{fd, static_cast<short>(out ? POLLOUT : POLLIN), 0};
        switch (poll_until(&p, 1, deadline)) {
        case PollResult::ready:
            continue;
        case PollResult::timeout:
            return VIP_TIMEOUT;
        case PollResult::interrupted:
            if (!interruptible) continue;
            return VIP_INTERRUPTED;
        case PollResult::error:
            return VIP_ERROR_RESOURCE;
        }
    }
}

// Acceptor side, after the checks: Accept, then the requester's Ack.  Not
// interruptible: the requester may have connected already.
VIP_RETURN offer(Vi *vi, int fd, const Hello &req, const VIP_NET_ADDRESS *local) {
    Hello a = make_hello(kHelloAccept, vi, local);
    a.window = own_window(fd);
    VIP_RETURN rc = send_hello(fd, a, now_ns() + vipl::config().connect_ack_ms * 1000000ull, false);
    Hello ack{};
    if (rc == VIP_SUCCESS)
        rc = recv_hello(fd, &ack, now_ns() + vipl::config().connect_ack_ms * 1000000ull, false);
    if (rc != VIP_SUCCESS || ack.type != kHelloAck) {
        VIPL_INFO("tcp: connection request abandoned before the handshake ended");
        return VIP_TIMEOUT;
    }
    return start_endpoint(vi, fd, req);
}

// Requester side: the answer to our Hello.
VIP_RETURN conclude(Vi *vi, int fd, const Hello &answer, const VIP_NET_ADDRESS *local,
                    VIP_VI_ATTRIBUTES *rattrs) {
    if (answer.type == kHelloReject) {
        uint32_t r = answer.reason;
        return r != VIP_SUCCESS && r < 32 ? static_cast<VIP_RETURN>(r) : VIP_REJECT;
    }
    if (answer.type != kHelloAccept) return VIP_REJECT;
    Hello ack = make_hello(kHelloAck, vi, local);
    VIP_RETURN rc =
        send_hello(fd, ack, now_ns() + vipl::config().connect_ack_ms * 1000000ull, false);
    if (rc != VIP_SUCCESS) return VIP_REJECT;
    rc = start_endpoint(vi, fd, answer);
    if (rc == VIP_SUCCESS && rattrs) fill_attrs(answer, rattrs);
    return rc;
}

} // namespace

Hello make_hello(uint32_t type, Vi *vi, const VIP_NET_ADDRESS *local) {
    Hello h{};
    h.type = type;
    h.reliability = vi->attrs.ReliabilityLevel;
    h.mtu = vi->attrs.MaxTransferSize;
    h.rdma = (vi->attrs.EnableRdmaWrite ? 1u : 0u) | (vi->attrs.EnableRdmaRead ? 2u : 0u);
    h.host_len = static_cast<uint16_t>(vi->nic->attrs.NicAddressLen);
    memcpy(h.host, vi->nic->address, h.host_len);
    h.disc_len = local ? std::min<uint16_t>(local->DiscriminatorLen, kMaxDisc) : 0;
    if (local) memcpy(h.disc, disc_of(local), h.disc_len);
    return h;
}

VIP_RETURN send_hello(int fd, const Hello &h, uint64_t deadline, bool interruptible) {
    uint8_t buf[kHelloWire];
    encode_hello(h, buf);
    return move_by(fd, buf, true, deadline, interruptible);
}

VIP_RETURN recv_hello(int fd, Hello *h, uint64_t deadline, bool interruptible) {
    uint8_t buf[kHelloWire];
    VIP_RETURN rc = move_by(fd, buf, false, deadline, interruptible);
    if (rc != VIP_SUCCESS) return rc;
    return decode_hello(buf, h) ? VIP_SUCCESS : VIP_REJECT;
}

// ------------------------------------------------------------ client-server

VIP_RETURN connect_wait(Nic *nic, const VIP_NET_ADDRESS *local, uint64_t deadline, ConnReq *req,
                        VIP_NET_ADDRESS *remote, VIP_VI_ATTRIBUTES *remote_attrs) {
    if (!local_ok(nic, local) || local->DiscriminatorLen > kMaxDisc) return VIP_INVALID_PARAMETER;
    const uint8_t *disc = disc_of(local);
    uint16_t dlen = local->DiscriminatorLen;
    Listener *l;
    {
        std::lock_guard<Mutex> g(listen_lock());
        VIP_RETURN rc = VIP_SUCCESS;
        l = listener_for(nic, port_of(disc, dlen), &rc);
        if (!l) return rc;
        rc = serve(nic, l, disc, dlen);
        if (rc != VIP_SUCCESS) return rc;
    }
    for (;;) {
        pollfd fds[16];
        int n;
        uint64_t wake = deadline;
        {
            std::lock_guard<Mutex> g(listen_lock());
            Incoming *in = take_incoming(nic, l, kHelloRequest, disc, dlen);
            if (in) {
                const Hello &h = in->hello;
                remote->HostAddressLen = h.host_len;
                remote->DiscriminatorLen = h.disc_len;
                memcpy(remote->HostAddress, h.host, h.host_len);
                memcpy(remote->HostAddress + h.host_len, h.disc, h.disc_len);
                fill_attrs(h, remote_attrs);
                req->prov = in;
                return VIP_SUCCESS;
            }
            n = incoming_fds(nic, l, fds, 16, &wake);
        }
        VIP_RETURN rc = poll_verdict(poll_until(fds, n, wake), deadline);
        if (rc != VIP_SUCCESS) return rc;
    }
}

VIP_RETURN connect_wait_fd(Nic *nic, const VIP_NET_ADDRESS *local, int *fd) {
    if (!local_ok(nic, local) || local->DiscriminatorLen > kMaxDisc) return VIP_INVALID_PARAMETER;
    const uint8_t *disc = disc_of(local);
    uint16_t dlen = local->DiscriminatorLen;
    std::lock_guard<Mutex> g(listen_lock());
    VIP_RETURN rc = VIP_SUCCESS;
    Listener *l = listener_for(nic, port_of(disc, dlen), &rc);
    if (!l) return rc;
    rc = serve(nic, l, disc, dlen);
    if (rc != VIP_SUCCESS) return rc;
    return request_wait_fd(nic, l, disc, dlen, fd);
}

VIP_RETURN connect_accept(ConnReq *req, Vi *vi) {
    auto *in = static_cast<Incoming *>(req->prov);
    if (!in || in->fd < 0) return VIP_INVALID_PARAMETER;
    VIP_RETURN rc = check_match(vi, in->hello);
    if (rc != VIP_SUCCESS) return rc;
    alignas(VIP_NET_ADDRESS) uint8_t buf[sizeof(VIP_NET_ADDRESS) + kMaxDisc];
    auto *local = reinterpret_cast<VIP_NET_ADDRESS *>(buf);
    local->HostAddressLen = 0;
    local->DiscriminatorLen = in->hello.want_len;
    memcpy(local->HostAddress, in->hello.want, in->hello.want_len);
    rc = offer(vi, in->fd, in->hello, local);
    if (rc == VIP_SUCCESS) in->fd = -1; // the endpoint owns it now
    return rc;
}

VIP_RETURN connect_reject(ConnReq *req) {
    auto *in = static_cast<Incoming *>(req->prov);
    if (in && in->fd >= 0) {
        Hello r{};
        r.type = kHelloReject;
        r.reason = VIP_REJECT;
        send_hello(in->fd, r, now_ns() + 100000000ull);
    }
    return VIP_SUCCESS;
}

void conn_free(ConnReq *req) {
    incoming_free(static_cast<Incoming *>(req->prov));
    req->prov = nullptr;
}

VIP_RETURN connect_request(Vi *vi, const VIP_NET_ADDRESS *local, const VIP_NET_ADDRESS *remote,
                           uint64_t deadline, VIP_VI_ATTRIBUTES *remote_attrs) {
    if (!local_ok(vi->nic, local) || local->DiscriminatorLen > kMaxDisc ||
        remote->DiscriminatorLen > kMaxDisc)
        return VIP_INVALID_PARAMETER;
    sockaddr_storage to;
    socklen_t tolen;
    if (!to_sockaddr(vi->nic, remote, &to, &tolen)) return VIP_NOT_REACHABLE;
    int err = 0;
    int fd = start_connect(vi->nic, to, tolen, &err);
    if (fd < 0) return connect_error(err);
    VIP_RETURN rc = finish_connect(fd, deadline);
    Hello h = make_hello(kHelloRequest, vi, local);
    h.window = own_window(fd);
    h.want_len = remote->DiscriminatorLen;
    memcpy(h.want, disc_of(remote), h.want_len);
    if (rc == VIP_SUCCESS) rc = send_hello(fd, h, deadline);
    Hello answer{};
    if (rc == VIP_SUCCESS) rc = recv_hello(fd, &answer, deadline);
    if (rc == VIP_SUCCESS) rc = conclude(vi, fd, answer, local, remote_attrs);
    if (rc != VIP_SUCCESS) fd_close(fd);
    return rc;
}

// ------------------------------------------------------------- peer-to-peer

VIP_RETURN peer_request(Vi *vi, const VIP_NET_ADDRESS *local, const VIP_NET_ADDRESS *remote,
                        uint64_t deadline) {
    if (!local_ok(vi->nic, local) || local->DiscriminatorLen > kMaxDisc ||
        remote->DiscriminatorLen > kMaxDisc)
        return VIP_INVALID_PARAMETER;
    auto p = std::make_unique<P2p>(); // freed on every early return
    if (!to_sockaddr(vi->nic, remote, &p->remote, &p->remote_len)) return VIP_NOT_REACHABLE;
    // Who listens: the larger of (address, discriminator).
    const uint8_t *rh = remote->HostAddressLen ? remote->HostAddress : vi->nic->address;
    int cmp = memcmp(vi->nic->address, rh, vi->nic->attrs.NicAddressLen);
    if (cmp == 0) {
        cmp = memcmp(disc_of(local), disc_of(remote),
                     std::min(local->DiscriminatorLen, remote->DiscriminatorLen));
        if (cmp == 0) cmp = static_cast<int>(local->DiscriminatorLen) - remote->DiscriminatorLen;
    }
    if (cmp == 0) return VIP_INVALID_PARAMETER;
    p->acceptor = cmp > 0;
    p->deadline = deadline;
    p->hello = make_hello(kHelloPeerRequest, vi, local);
    p->hello.want_len = remote->DiscriminatorLen;
    memcpy(p->hello.want, disc_of(remote), p->hello.want_len);
    if (p->acceptor) {
        std::lock_guard<Mutex> g(listen_lock());
        VIP_RETURN rc = VIP_SUCCESS;
        p->port = port_of(disc_of(local), local->DiscriminatorLen);
        Listener *l = listener_for(vi->nic, p->port, &rc);
        if (l) rc = serve(vi->nic, l, disc_of(local), local->DiscriminatorLen);
        if (!l || rc != VIP_SUCCESS) return rc;
    }
    endpoint(vi)->p2p = p.release();
    return VIP_SUCCESS;
}

void p2p_free(Endpoint *ep) {
    delete ep->p2p; // with the descriptor it holds
    ep->p2p = nullptr;
}

static void retry_later(P2p *p, uint64_t now, uint64_t *deadline) {
    if (p->sock >= 0) fd_close(p->sock);
    p->sock = -1;
    p->connected = false;
    p->sent = p->got = 0;
    util::retry_after(p, now, 10000000, deadline); // the peer may not listen yet: 10 ms
}

static VIP_RETURN p2p_connector(Vi *vi, Endpoint *ep, P2p *p, VIP_VI_ATTRIBUTES *rattrs,
                                pollfd *fds, int *nfds, uint64_t *deadline) {
    uint64_t now = now_ns();
    if (p->sock < 0) {
        if (util::too_soon(p, now, deadline)) return VIP_NOT_DONE;
        int err = 0;
        p->sock = start_connect(vi->nic, p->remote, p->remote_len, &err);
        if (p->sock < 0) {
            if (connect_error(err) == VIP_ERROR_RESOURCE) return VIP_ERROR_RESOURCE;
            retry_later(p, now, deadline);
            return VIP_NOT_DONE;
        }
        p->hello.window = own_window(p->sock);
        encode_hello(p->hello, p->out);
    }
    if (!p->connected) {
        pollfd w{p->sock, POLLOUT, 0};
        if (poll(&w, 1, 0) == 0) {
            fds[0] = pollfd{p->sock, POLLOUT, 0};
            *nfds = 1;
            return VIP_NOT_DONE;
        }
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(p->sock, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            retry_later(p, now, deadline);
            return VIP_NOT_DONE;
        }
        p->connected = true;
    }
    bool failed = false;
    if (p->sent < kHelloWire && !move(p->sock, p->out, &p->sent, true, &failed)) {
        if (failed) {
            retry_later(p, now, deadline);
            return VIP_NOT_DONE;
        }
        fds[0] = pollfd{p->sock, POLLOUT, 0};
        *nfds = 1;
        return VIP_NOT_DONE;
    }
    if (!move(p->sock, p->in, &p->got, false, &failed)) {
        if (failed) { // the listener went away or handed us nowhere: start over
            retry_later(p, now, deadline);
            return VIP_NOT_DONE;
        }
        fds[0] = pollfd{p->sock, POLLIN, 0};
        *nfds = 1;
        return VIP_NOT_DONE;
    }
    Hello answer{};
    if (!decode_hello(p->in, &answer) ||
        (answer.type == kHelloReject && answer.reason == VIP_NO_MATCH)) {
        retry_later(p, now, deadline);
        return VIP_NOT_DONE;
    }
    alignas(VIP_NET_ADDRESS) uint8_t buf[sizeof(VIP_NET_ADDRESS) + kMaxDisc];
    auto *local = reinterpret_cast<VIP_NET_ADDRESS *>(buf);
    local->HostAddressLen = 0;
    local->DiscriminatorLen = p->hello.disc_len;
    memcpy(local->HostAddress, p->hello.disc, p->hello.disc_len);
    int fd = p->sock;
    p->sock = -1;
    VIP_RETURN rc = conclude(vi, fd, answer, local, rattrs);
    if (rc != VIP_SUCCESS) fd_close(fd);
    p2p_free(ep);
    return rc;
}

static VIP_RETURN p2p_acceptor(Vi *vi, Endpoint *ep, P2p *p, VIP_VI_ATTRIBUTES *rattrs, pollfd *fds,
                               int *nfds, uint64_t *deadline) {
    Incoming *in;
    {
        std::lock_guard<Mutex> g(listen_lock());
        VIP_RETURN rc = VIP_SUCCESS;
        Listener *l = listener_for(vi->nic, p->port, &rc);
        if (!l) return rc;
        in = take_incoming(vi->nic, l, kHelloPeerRequest, p->hello.disc, p->hello.disc_len,
                           p->hello.want, p->hello.want_len);
        if (!in) {
            *nfds = incoming_fds(vi->nic, l, fds, 4, deadline);
            return VIP_NOT_DONE;
        }
    }
    VIP_RETURN rc = check_match(vi, in->hello);
    if (rc != VIP_SUCCESS) {
        Hello r{};
        r.type = kHelloReject;
        r.reason = rc;
        send_hello(in->fd, r, now_ns() + 100000000ull);
        incoming_free(in);
        p2p_free(ep);
        return rc;
    }
    alignas(VIP_NET_ADDRESS) uint8_t buf[sizeof(VIP_NET_ADDRESS) + kMaxDisc];
    auto *local = reinterpret_cast<VIP_NET_ADDRESS *>(buf);
    local->HostAddressLen = 0;
    local->DiscriminatorLen = p->hello.disc_len;
    memcpy(local->HostAddress, p->hello.disc, p->hello.disc_len);
    rc = offer(vi, in->fd, in->hello, local);
    if (rc == VIP_SUCCESS) {
        in->fd = -1;
        if (rattrs) fill_attrs(in->hello, rattrs);
    }
    incoming_free(in);
    if (rc == VIP_SUCCESS) {
        p2p_free(ep);
        return VIP_SUCCESS;
    }
    return VIP_NOT_DONE; // that requester went away: wait for another
}

VIP_RETURN peer_progress(Vi *vi, VIP_VI_ATTRIBUTES *rattrs, pollfd *fds, int *nfds,
                         uint64_t *deadline) {
    return util::peer_progress<Endpoint, P2p>(vi, rattrs, fds, nfds, deadline, p2p_acceptor,
                                              p2p_connector);
}

} // namespace vipl::tcp
