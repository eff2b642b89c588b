// Life of a tcp endpoint: creation, the connected socket's tuning,
// teardown, failures, and what waiters poll.
#include "core/arena.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/fds.h"
#include "core/lifecycle.h"
#include "core/log.h"
#include "core/vi.h"
#include "prov/tcp/tcp.h"
#include "prov/tcp/tcp_config.h"
#include "prov/util/endpoint.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/time.h>
#include <unistd.h>

namespace vipl::tcp {
namespace {

// A silent peer is dead after TCP_DEAD_MS: unacknowledged data gives up
// then (TCP_USER_TIMEOUT), and an idle connection probes every second or so
// so that the same timeout applies to it.
void tune_socket(int fd) {
    const TcpConfig &c = config();
    int one = 1;
    int probe_s = std::max<int>(1, static_cast<int>(c.dead_ms / 3000));
    int count = std::max<int>(2, static_cast<int>(c.dead_ms / 1000 / probe_s) + 1);
    unsigned timeout = c.dead_ms;
    int saved = errno;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &probe_s, sizeof probe_s);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &probe_s, sizeof probe_s);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof timeout);
    // Blocking, for a direct sleeper's recv() (every other call says
    // MSG_DONTWAIT), which a bounded wait keeps responsive and which a
    // signal handler always interrupts (a socket timeout is never restarted).
    timeval slice{0, static_cast<suseconds_t>(kDirectSliceNs / 1000)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof slice);
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    errno = saved;
}

void free_rx(Vi *vi, Endpoint *ep) {
    if (ep->rx) object_free(ep->rx, kRxBuffer, vi->shareable);
    ep->rx = nullptr;
}

} // namespace

VIP_RETURN vi_create(Vi *vi) {
    void *mem = object_alloc(sizeof(Endpoint), vi->shareable);
    if (!mem) return VIP_ERROR_RESOURCE;
    vi->prov = new (mem) Endpoint;
    return VIP_SUCCESS;
}

VIP_RETURN start_endpoint(Vi *vi, int sock, const Hello &peer) {
    Endpoint *ep = endpoint(vi);
    auto *rx = static_cast<uint8_t *>(object_alloc(kRxBuffer, vi->shareable));
    int epfd = fd_track(epoll_create1(EPOLL_CLOEXEC));
    if (!rx || epfd < 0) {
        VIPL_ERROR("tcp: no room for a connection: %s", strerror(errno));
        if (rx) object_free(rx, kRxBuffer, vi->shareable);
        if (epfd >= 0) fd_close(epfd);
        return VIP_ERROR_RESOURCE;
    }
    tune_socket(sock);
    P2p *p2p = ep->p2p;
    *ep = Endpoint{};
    ep->p2p = p2p;
    ep->sock = sock;
    ep->epfd = epfd;
    ep->rx = rx;
    ep->reliability = vi->attrs.ReliabilityLevel;
    ep->mtu = vi->attrs.MaxTransferSize;
    ep->ack_threshold = config().ack_threshold;
    ep->frame_wait_us = config().frame_wait_us;
    ep->window = peer.window;
    ep->my_window = own_window(sock);
    ep->up = true;
    vi_hold_fd(vi, sock);
    vi_hold_fd(vi, epfd);
    return VIP_SUCCESS;
}

// The socket joins epfd at the first need of it (a wait set, a CQ, a wait
// fd, blocked output), not at connection: while it is out, a packet wakes
// the socket's reader only, without the epoll callback (a lone sleeper that
// reads the socket itself needs no more).
static void watch_socket(Endpoint *ep, uint32_t events) {
    if (ep->epfd < 0) return;
    epoll_event ev{};
    ev.events = events;
    int saved = errno;
    epoll_ctl(ep->epfd, ep->sock_watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, ep->sock, &ev);
    errno = saved;
    ep->sock_watched = true;
}

void set_want_out(Endpoint *ep, bool on) {
    if (ep->want_out == on || ep->epfd < 0) return;
    watch_socket(ep, EPOLLIN | EPOLLRDHUP | (on ? uint32_t(EPOLLOUT) : 0u));
    ep->want_out = on;
}

void transport_down(Vi *vi, Endpoint *ep) {
    if (ep->sock >= 0) {
        int saved = errno;
        // FIN after what was written; then take what the peer still sends,
        // so that closing does not answer with a reset that could destroy
        // our last frames before the peer reads them.  Every holder's copy
        // sees the end at once; each closes its copies (vi_drop_copies).
        shutdown(ep->sock, SHUT_WR);
        stop_direct(ep);
        uint8_t sink[4096];
        for (int i = 0; i < 256 && recv(ep->sock, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
        }
        shutdown(ep->sock, SHUT_RD);
        errno = saved;
    }
    vi_drop_copies(vi);
    free_rx(vi, ep);
    free_owed(vi, ep);
    P2p *p2p = ep->p2p;
    *ep = Endpoint{};
    ep->p2p = p2p;
    vi_transport_gone(vi);
}

VIP_RETURN endpoints(Vi *vi, VIP_VI_ENDPOINTS *out) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up || ep->sock < 0) return VIP_INVALID_STATE;
    // The socket's own addresses: what the peer said of itself in its Hello
    // (host, discriminator) is not evidence of where it is.
    VIP_VI_ENDPOINTS e{};
    e.Kind = VIP_ENDPOINTS_SOCKET;
    socklen_t ll = sizeof e.LocalSocket, rl = sizeof e.RemoteSocket;
    if (getsockname(ep->sock, reinterpret_cast<sockaddr *>(&e.LocalSocket), &ll) != 0 ||
        getpeername(ep->sock, reinterpret_cast<sockaddr *>(&e.RemoteSocket), &rl) != 0)
        return VIP_INVALID_STATE; // reset by the peer: the kernel forgot it
    e.PeerPid = -1;
    e.PeerUid = static_cast<uid_t>(-1);
    e.PeerGid = static_cast<gid_t>(-1);
    e.HostAddressLen = static_cast<VIP_UINT16>(vi->nic->attrs.NicAddressLen);
    memcpy(e.HostAddress, vi->nic->address, e.HostAddressLen);
    e.PeerReadsAlone = VIP_FALSE; // served by this side's progress
    *out = e;
    return VIP_SUCCESS;
}

void disconnect(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (!ep) return;
    p2p_free(ep);
    transport_down(vi, ep);
}

void leave(Vi *) {
    // The core closes our copies; the holders that stay keep theirs and the state.
}

void abandon(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return;
    // The stream may end in the middle of a frame: the peer sees the
    // connection end, never a frame made of two holders' halves.
    shutdown(ep->sock, SHUT_RDWR);
    transport_down(vi, ep);
}

void vi_destroy(Vi *vi) {
    util::destroy_endpoint(vi, endpoint(vi), disconnect);
}

void connection_lost(Vi *vi, Endpoint *ep, VIP_ERROR_CODE code) {
    if (!ep->up) return;
    transport_down(vi, ep);
    vi_fail(vi, code);
}

void break_connection(Vi *vi, Endpoint *ep, VIP_ERROR_CODE local, uint32_t remote, uint64_t seq,
                      VIP_DESCRIPTOR *desc) {
    if (!ep->up) return;
    owe(vi, ep, Owed{Owed::kError, 0, 0, remote, seq}); // lost if no room: the close still tells
    ep->closing = true;
    flush_out(vi, ep); // best effort: a full socket loses the error frame, not the close
    if (!ep->up) return;
    transport_down(vi, ep);
    vi_fail(vi, local, desc);
}

int wait_fds(Vi *vi, pollfd *fds, int max) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up || max < 2) return 0;
    if (!ep->sock_watched) watch_socket(ep, EPOLLIN | EPOLLRDHUP);
    fds[0] = pollfd{ep->epfd, POLLIN, 0};    // input, and output space while it is short
    fds[1] = pollfd{ep->sock, POLLRDHUP, 0}; // the peer hung up or the link died
    return 2;
}

int sleep_fds(Vi *vi, pollfd *fds, int max) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up || max < 1) return 0;
    // A direct sleeper reads the socket; it rings the doorbell when it is done.
    if (__atomic_load_n(&ep->direct, __ATOMIC_ACQUIRE)) return 0;
    // The socket itself: one level less than the epoll set registered elsewhere.
    fds[0] =
        pollfd{ep->sock, static_cast<short>(POLLIN | POLLRDHUP | (ep->want_out ? POLLOUT : 0)), 0};
    return 1;
}

void check_peer(Vi *) {
    // A hang-up, a reset or a dead link shows as the socket's end or error
    // to the progress that every caller runs right after.
}

bool peer_busy(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    // Whether the peer sleeps cannot be seen across a wire; what can: it has a message
    // of ours it has not answered (a server at work on a request, a client about to
    // send its next one).  The spin policy counts the guesses that miss and stops
    // trusting them (an idle session).
    return ep && ep->up && ep->answer_owed;
}

} // namespace vipl::tcp
