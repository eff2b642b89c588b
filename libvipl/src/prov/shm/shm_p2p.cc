// Peer-to-peer connection set-up (VipConnectPeerRequest/Done/Wait): each side both
// listens and connects until the one whose turn it is makes the connection; the
// handshake itself is shm_handshake.cc's.
#include "core/clock.h"
#include "core/config.h"
#include "core/fds.h"
#include "core/log.h"
#include "core/wait.h"
#include "prov/shm/shm.h"
#include "prov/shm/shm_config.h"
#include "prov/shm/shm_handshake.h"
#include "prov/util/endpoint.h"
#include "prov/util/unix_socket.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace vipl::shm {

// A connector whose peer does not listen yet tries again this much later.
constexpr uint64_t kRetryNs = 2000000;

struct P2p {
    bool acceptor = false;
    int lfd = -1;
    int sock = -1; // connector: the connection; acceptor: one whose request is coming
    bool sent = false;
    uint64_t deadline = 0;
    uint64_t next_try = 0;      // connector: when to connect again
    uint64_t sock_deadline = 0; // acceptor: for the request on sock to come
    Hello hello{};              // what this side sends (connector) / expects (acceptor)

    P2p() = default;
    P2p(const P2p &) = delete;
    ~P2p() {
        if (lfd >= 0) fd_close(lfd);
        if (sock >= 0) fd_close(sock);
    }
};

using util::Recv;
using util::send_with_fds;

// ------------------------------------------------------------- peer-to-peer

VIP_RETURN peer_request(Vi *vi, const VIP_NET_ADDRESS *local, const VIP_NET_ADDRESS *remote,
                        uint64_t deadline) {
    if (!is_this_host(vi->nic, remote)) return VIP_NOT_REACHABLE;
    const uint8_t *ld = local->HostAddress + local->HostAddressLen;
    const uint8_t *rd = remote->HostAddress + remote->HostAddressLen;
    int cmp = memcmp(ld, rd, std::min(local->DiscriminatorLen, remote->DiscriminatorLen));
    if (cmp == 0) cmp = static_cast<int>(local->DiscriminatorLen) - remote->DiscriminatorLen;
    if (cmp == 0) return VIP_INVALID_PARAMETER;
    auto p = std::make_unique<P2p>(); // freed on every early return
    p->acceptor = cmp > 0;            // the larger discriminator listens, the smaller connects
    p->deadline = deadline;
    p->hello = make_hello(kMsgPeerRequest, vi, local);
    p->hello.want_len = remote->DiscriminatorLen;
    memcpy(p->hello.want, rd, remote->DiscriminatorLen);
    if (p->acceptor) {
        p->lfd = util::seqpacket_socket();
        sockaddr_un sa;
        std::string name = socket_name("p2p", local);
        socklen_t len = util::abstract_address(name, &sa);
        if (p->lfd < 0 || len == 0 || bind(p->lfd, reinterpret_cast<sockaddr *>(&sa), len) < 0 ||
            listen(p->lfd, 16) < 0) {
            VIPL_WARN("peer connection: cannot listen on %s: %s", name.c_str(), strerror(errno));
            return VIP_ERROR_RESOURCE;
        }
    }
    endpoint(vi)->p2p = p.release();
    return VIP_SUCCESS;
}

void p2p_free(Endpoint *ep) {
    delete ep->p2p; // with the descriptors it holds
    ep->p2p = nullptr;
}

static VIP_RETURN p2p_connector(Vi *vi, Endpoint *ep, P2p *p, VIP_VI_ATTRIBUTES *rattrs,
                                pollfd *fds, int *nfds, uint64_t *deadline) {
    uint64_t now = now_ns();
    if (p->sock < 0) {
        if (util::too_soon(p, now, deadline)) return VIP_NOT_DONE;
        alignas(VIP_NET_ADDRESS) uint8_t buf[sizeof(VIP_NET_ADDRESS) + kMaxDiscriminator];
        auto *want = reinterpret_cast<VIP_NET_ADDRESS *>(buf);
        want->HostAddressLen = 0;
        want->DiscriminatorLen = p->hello.want_len;
        memcpy(want->HostAddress, p->hello.want, p->hello.want_len);
        int s = util::seqpacket_socket();
        if (s < 0) return VIP_ERROR_RESOURCE;
        if (connect_name(s, socket_name("p2p", want)) != 0) {
            fd_close(s);
            util::retry_after(p, now, kRetryNs, deadline); // the peer has not asked yet
            return VIP_NOT_DONE;
        }
        p->sock = s;
        p->sent = send_with_fds(s, &p->hello, sizeof p->hello, nullptr, 0);
    }
    VIP_RETURN rc = await_answer(vi, p->sock, now, rattrs, false);
    if (rc == VIP_TIMEOUT) {
        fds[0] = pollfd{p->sock, POLLIN, 0};
        *nfds = 1;
        return VIP_NOT_DONE;
    }
    if (rc == VIP_SUCCESS) {
        p->sock = -1; // owned by the endpoint
        p2p_free(ep);
        return VIP_SUCCESS;
    }
    if (rc == VIP_REJECT) { // listener went away or refused this match: start over
        fd_close(p->sock);
        p->sock = -1;
        util::retry_after(p, now, kRetryNs, deadline);
        return VIP_NOT_DONE;
    }
    p2p_free(ep);
    return rc;
}

static VIP_RETURN p2p_acceptor(Vi *vi, Endpoint *ep, P2p *p, VIP_VI_ATTRIBUTES *rattrs, pollfd *fds,
                               int *nfds, uint64_t *deadline) {
    for (;;) {
        if (p->sock < 0) {
            int s = fd_track(accept4(p->lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
            if (s < 0) {
                fds[0] = pollfd{p->lfd, POLLIN, 0};
                *nfds = 1;
                return VIP_NOT_DONE;
            }
            p->sock = s;
            p->sock_deadline = now_ns() + vipl::config().connect_ack_ms * 1000000ull;
        }
        Hello h{};
        int n = 0;
        Recv r = util::recv_with_fds(p->sock, &h, sizeof h, nullptr, 0, &n);
        if (r == Recv::again && now_ns() < p->sock_deadline) {
            // The request is on its way: the caller waits for it (interruptibly).
            fds[0] = pollfd{p->sock, POLLIN, 0};
            *nfds = 1;
            *deadline = std::min(*deadline, p->sock_deadline);
            return VIP_NOT_DONE;
        }
        int s = p->sock;
        p->sock = -1;
        ucred cred{};
        socklen_t cl = sizeof cred;
        bool ok = r == Recv::ok && h.magic == kMagic && h.version == kVersion &&
                  h.type == kMsgPeerRequest && h.disc_len <= kMaxDiscriminator &&
                  h.want_len <= kMaxDiscriminator &&
                  getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0;
        // The request must come from the peer we expect, asking for us.
        if (!ok ||
            !same_disc(h.addr + kHostAddressLen, h.disc_len, p->hello.want, p->hello.want_len) ||
            !same_disc(h.want, h.want_len, p->hello.addr + kHostAddressLen, p->hello.disc_len)) {
            if (ok) send_reject(s, VIP_NO_MATCH);
            fd_close(s);
            continue;
        }
        VIP_RETURN rc = check_match(vi, h.attrs);
        if (rc != VIP_SUCCESS) {
            send_reject(s, rc);
            fd_close(s);
            p2p_free(ep);
            return rc;
        }
        rc = offer(vi, s, h, cred.pid, rattrs);
        if (rc != VIP_SUCCESS) {
            fd_close(s);
            continue;
        }
        p2p_free(ep);
        return VIP_SUCCESS;
    }
}

VIP_RETURN peer_progress(Vi *vi, VIP_VI_ATTRIBUTES *rattrs, pollfd *fds, int *nfds,
                         uint64_t *deadline) {
    return util::peer_progress<Endpoint, P2p>(vi, rattrs, fds, nfds, deadline, p2p_acceptor,
                                              p2p_connector);
}

} // namespace vipl::shm
