// Client-server connection set-up (VipConnectWait/Accept/Reject, VipConnectRequest)
// over the NIC's listening sockets; the handshake itself is shm_handshake.cc's.
#include "core/clock.h"
#include "core/config.h"
#include "core/fds.h"
#include "core/log.h"
#include "core/wait.h"
#include "prov/shm/shm.h"
#include "prov/shm/shm_config.h"
#include "prov/shm/shm_handshake.h"
#include "prov/util/unix_socket.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace vipl::shm {

struct PendingConn {
    int sock;
    Hello hello;
    pid_t pid;
};

namespace {

using util::Recv;
using util::send_with_fds;

// The wait descriptor of l (if made) follows its early connections: one
// becomes readable when its request, or its end, arrives.
void watch_early(ShmNic::Listener *l, int sock, bool add) {
    if (l->wait_ep < 0) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    epoll_ctl(l->wait_ep, add ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, sock, &ev);
}

ShmNic::Listener *find_listener(ShmNic *sn, int lfd) {
    for (auto &x : sn->listeners)
        if (x.fd == lfd) return &x;
    return nullptr;
}

// A connection accepted on l whose request has come, or nullptr (NIC lock
// held).  Accepts what waits first.  Connections whose request has not all
// come stay in l->early for the next look (a wait that ends meanwhile loses
// none); those whose request failed or is overdue are dropped.  *failed: the
// listener cannot accept (no descriptor left).
PendingConn *take_request(ShmNic::Listener *l, bool *failed) {
    for (;;) {
        int s = fd_track(accept4(l->fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (s < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
                VIPL_ERROR("accept: %s", strerror(errno));
                *failed = true;
            }
            break;
        }
        l->early.push_back({s, now_ns() + vipl::config().connect_ack_ms * 1000000ull});
        watch_early(l, s, true);
    }
    uint64_t now = now_ns();
    for (size_t i = 0; i < l->early.size();) {
        ShmNic::Listener::Early e = l->early[i];
        Hello h{};
        int nfds = 0;
        Recv r = util::recv_with_fds(e.sock, &h, sizeof h, nullptr, 0, &nfds);
        if (r == Recv::again && now < e.deadline) {
            ++i;
            continue;
        }
        l->early.erase(l->early.begin() + static_cast<ptrdiff_t>(i));
        watch_early(l, e.sock, false);
        ucred cred{};
        socklen_t cl = sizeof cred;
        bool ok = r == Recv::ok && h.magic == kMagic && h.version == kVersion &&
                  h.type == kMsgRequest && h.host_len <= kHostAddressLen &&
                  h.disc_len <= kMaxDiscriminator &&
                  getsockopt(e.sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0;
        if (ok) return new PendingConn{e.sock, h, cred.pid};
        fd_close(e.sock);
    }
    return nullptr;
}

} // namespace

// ------------------------------------------------------------ client-server

VIP_RETURN connect_wait(Nic *nic, const VIP_NET_ADDRESS *local, uint64_t deadline, ConnReq *req,
                        VIP_NET_ADDRESS *remote, VIP_VI_ATTRIBUTES *remote_attrs) {
    if (!is_this_host(nic, local)) return VIP_INVALID_PARAMETER;
    VIP_RETURN rc = VIP_SUCCESS;
    int lfd = listener_for(nic, socket_name("cs", local), &rc);
    if (lfd < 0) return rc;
    ShmNic *sn = shm_nic(nic);
    for (;;) {
        constexpr int kMaxPoll = 16;
        pollfd fds[kMaxPoll];
        int n = 0;
        uint64_t wake = deadline;
        PendingConn *pc = nullptr;
        {
            std::lock_guard<Mutex> g(sn->lock);
            ShmNic::Listener *l = find_listener(sn, lfd);
            if (!l) return VIP_INVALID_PARAMETER;
            bool failed = false;
            pc = take_request(l, &failed);
            if (!pc && failed) return VIP_ERROR_RESOURCE;
            if (!pc) {
                fds[n++] = pollfd{lfd, POLLIN, 0};
                for (const auto &e : l->early) {
                    if (n < kMaxPoll) fds[n++] = pollfd{e.sock, POLLIN, 0};
                    wake = std::min(wake, e.deadline);
                }
            }
        }
        if (pc) {
            const Hello &h = pc->hello;
            req->prov = pc;
            remote->HostAddressLen = h.host_len;
            remote->DiscriminatorLen = h.disc_len;
            memcpy(remote->HostAddress, h.addr, h.host_len);
            memcpy(remote->HostAddress + h.host_len, h.addr + kHostAddressLen, h.disc_len);
            fill_attrs(h.attrs, remote_attrs);
            return VIP_SUCCESS;
        }
        // What arrives while a handler runs stays queued for the next call.
        VIP_RETURN rc = poll_verdict(poll_until(fds, n, wake), deadline);
        if (rc != VIP_SUCCESS) return rc;
    }
}

VIP_RETURN connect_wait_fd(Nic *nic, const VIP_NET_ADDRESS *local, int *fd) {
    if (!is_this_host(nic, local)) return VIP_INVALID_PARAMETER;
    VIP_RETURN rc = VIP_SUCCESS;
    int lfd = listener_for(nic, socket_name("cs", local), &rc);
    if (lfd < 0) return rc;
    ShmNic *sn = shm_nic(nic);
    std::lock_guard<Mutex> g(sn->lock);
    ShmNic::Listener *l = find_listener(sn, lfd);
    if (!l) return VIP_INVALID_PARAMETER;
    if (l->wait_ep < 0) {
        // Level-triggered: readable while the backlog holds a connection or an
        // early one has bytes (or its end) to read, which connect_wait takes.
        int ep = fd_track(epoll_create1(EPOLL_CLOEXEC));
        if (ep < 0) {
            VIPL_ERROR("VipGetConnWaitFd: epoll_create1: %s", strerror(errno));
            return VIP_ERROR_RESOURCE;
        }
        epoll_event ev{};
        ev.events = EPOLLIN;
        bool ok = epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) == 0;
        for (const auto &e : l->early) ok = ok && epoll_ctl(ep, EPOLL_CTL_ADD, e.sock, &ev) == 0;
        if (!ok) {
            VIPL_ERROR("VipGetConnWaitFd: epoll_ctl: %s", strerror(errno));
            fd_close(ep);
            return VIP_ERROR_RESOURCE;
        }
        l->wait_ep = ep;
    }
    *fd = l->wait_ep;
    return VIP_SUCCESS;
}

VIP_RETURN connect_accept(ConnReq *req, Vi *vi) {
    auto *pc = static_cast<PendingConn *>(req->prov);
    if (!pc || pc->sock < 0) return VIP_INVALID_PARAMETER;
    VIP_RETURN rc = check_match(vi, pc->hello.attrs);
    if (rc != VIP_SUCCESS) return rc;
    rc = offer(vi, pc->sock, pc->hello, pc->pid, nullptr);
    if (rc == VIP_SUCCESS) pc->sock = -1; // the endpoint owns it now
    return rc;
}

VIP_RETURN connect_reject(ConnReq *req) {
    auto *pc = static_cast<PendingConn *>(req->prov);
    if (pc && pc->sock >= 0) send_reject(pc->sock, VIP_REJECT);
    return VIP_SUCCESS;
}

void conn_free(ConnReq *req) {
    auto *pc = static_cast<PendingConn *>(req->prov);
    if (!pc) return;
    if (pc->sock >= 0) fd_close(pc->sock);
    delete pc;
    req->prov = nullptr;
}

VIP_RETURN connect_request(Vi *vi, const VIP_NET_ADDRESS *local, const VIP_NET_ADDRESS *remote,
                           uint64_t deadline, VIP_VI_ATTRIBUTES *remote_attrs) {
    if (!is_this_host(vi->nic, remote)) return VIP_NOT_REACHABLE;
    int s = util::seqpacket_socket();
    if (s < 0) return VIP_ERROR_RESOURCE;
    std::string name = socket_name("cs", remote);
    for (;;) {
        int err = connect_name(s, name);
        if (err == 0) break;
        if (err == ECONNREFUSED || err == ENOENT) {
            fd_close(s);
            return VIP_NO_MATCH;
        }
        if (err != EAGAIN && err != EINTR) {
            fd_close(s);
            VIPL_ERROR("connect: %s", strerror(err));
            return VIP_ERROR_RESOURCE;
        }
        // Backlog full: try again shortly, until the deadline.
        uint64_t retry = now_ns() + 1000000;
        PollResult pr = poll_until(nullptr, 0, retry < deadline ? retry : deadline);
        if (pr == PollResult::interrupted) {
            fd_close(s);
            return VIP_INTERRUPTED;
        }
        if (now_ns() >= deadline) {
            fd_close(s);
            return VIP_TIMEOUT;
        }
    }
    Hello h = make_hello(kMsgRequest, vi, local);
    if (!send_with_fds(s, &h, sizeof h, nullptr, 0)) {
        fd_close(s);
        return VIP_NO_MATCH;
    }
    VIP_RETURN rc = await_answer(vi, s, deadline, remote_attrs);
    if (rc != VIP_SUCCESS) fd_close(s);
    return rc;
}

} // namespace vipl::shm
