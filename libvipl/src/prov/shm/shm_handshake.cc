// The handshake of both set-ups (shm_wire.h): the acceptor's offer of a new
// connection, the requester's join, refusals, and the socket work around them.
#include "prov/shm/shm_handshake.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/fds.h"
#include "core/log.h"
#include "core/wait.h"
#include "prov/shm/shm.h"
#include "prov/shm/shm_config.h"
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

// A handshake message with the fields every one starts with: the protocol, its type,
// the sender's pid and (when it has one here) NIC.
template <class Msg>
static Msg make_msg(uint32_t type, Nic *nic) {
    Msg m{};
    m.magic = kMagic;
    m.version = kVersion;
    m.type = type;
    m.pid = static_cast<uint32_t>(getpid());
    if (nic) m.nic_id = shm_nic(nic)->id;
    return m;
}

static WireAttrs wire_attrs(const VIP_VI_ATTRIBUTES &a) {
    return WireAttrs{a.ReliabilityLevel,
                     (a.EnableRdmaWrite ? kEndRdmaWrite : 0u) |
                         (a.EnableRdmaRead ? kEndRdmaRead : 0u),
                     a.MaxTransferSize};
}

void fill_attrs(const WireAttrs &w, VIP_VI_ATTRIBUTES *out) {
    *out = VIP_VI_ATTRIBUTES{};
    out->ReliabilityLevel = static_cast<VIP_RELIABILITY_LEVEL>(w.reliability);
    out->MaxTransferSize = w.mtu;
    out->EnableRdmaWrite = (w.rdma & kEndRdmaWrite) ? VIP_TRUE : VIP_FALSE;
    out->EnableRdmaRead = (w.rdma & kEndRdmaRead) ? VIP_TRUE : VIP_FALSE;
}

VIP_RETURN check_match(const Vi *vi, const WireAttrs &w) {
    if (vi->attrs.ReliabilityLevel != w.reliability) return VIP_INVALID_RELIABILITY_LEVEL;
    if (vi->attrs.MaxTransferSize != w.mtu) return VIP_INVALID_MTU;
    return VIP_SUCCESS;
}

Hello make_hello(uint32_t type, Vi *vi, const VIP_NET_ADDRESS *local) {
    Hello h = make_msg<Hello>(type, vi->nic);
    h.attrs = wire_attrs(vi->attrs);
    h.probe = probe_address();
    h.host_len = kHostAddressLen;
    memcpy(h.addr, vi->nic->address, kHostAddressLen);
    h.disc_len = local->DiscriminatorLen;
    memcpy(h.addr + kHostAddressLen, local->HostAddress + local->HostAddressLen,
           local->DiscriminatorLen);
    return h;
}

using util::Recv;
using util::send_with_fds;

// The same, waiting until the deadline.  An interruptible wait ends when a
// signal handler runs; the others go on (the last step of a handshake, which
// both sides must see end the same way).
static Recv recv_msg(int sock, void *msg, size_t len, int *fds, int max_fds, int *nfds,
                     uint64_t deadline, bool interruptible) {
    for (;;) {
        int saved = errno;
        Recv r = util::recv_with_fds(sock, msg, len, fds, max_fds, nfds);
        errno = saved;
        if (r != Recv::again) return r;
        pollfd p{sock, POLLIN, 0};
        switch (poll_until(&p, 1, deadline)) {
        case PollResult::ready:
            break;
        case PollResult::timeout:
            return Recv::timeout;
        case PollResult::interrupted:
            if (!interruptible) break;
            return Recv::interrupted;
        case PollResult::error:
            return Recv::error;
        }
    }
}

static void close_fds(int *fds, int n) {
    for (int i = 0; i < n; ++i)
        if (fds[i] >= 0) fd_close(fds[i]);
}

// Returns whether this end may read and write the peer's memory (the peer may
// overwrite the word in the shared block: the caller keeps this answer).
static bool fill_own_end(Vi *vi, EndCtl *me, pid_t peer, uint64_t peer_probe) {
    bool can_access = cross_memory_attach_works(peer, peer_probe);
    me->pid = static_cast<uint32_t>(getpid());
    me->ptag = vi->ptag_id;
    me->rdma = (vi->attrs.EnableRdmaWrite ? kEndRdmaWrite : 0u) |
               (vi->attrs.EnableRdmaRead ? kEndRdmaRead : 0u);
    me->can_access = can_access ? 1 : 0;
    me->shareable = vi->shareable ? 1 : 0;
    me->cpu.store(-1, std::memory_order_relaxed);
    // Up before the other side can see this end at all.
    me->state.store(kEndUp, std::memory_order_release);
    return can_access;
}

// The memfd a peer handed over: sealed so that it can never shrink (a peer that
// truncated it would fault every access here), at least `size` bytes.
static bool sealed_memfd(int fd, uint64_t size) {
    struct stat sb;
    int seals = fcntl(fd, F_GET_SEALS);
    return seals >= 0 && (seals & F_SEAL_SHRINK) && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
           static_cast<uint64_t>(sb.st_size) >= size;
}

// The peer's doorbell: an anonymous-inode file like our own eventfd (`own`), in
// non-blocking mode, so that ringing it never waits.  Anything else, a pipe or a
// socket, could block the ringer; of the anonymous-inode files only an eventfd takes
// a write at all.  (fstat, not /proc, which a container may lack.)
static bool is_doorbell(int fd, int own) {
    struct stat a, b;
    int fl = fcntl(fd, F_GETFL);
    return fstat(fd, &a) == 0 && fstat(own, &b) == 0 && (a.st_mode & S_IFMT) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino && fl >= 0 && (fl & O_NONBLOCK);
}

// The geometry of a connection's memory as this side decided (acceptor) or checked
// it (requester): never read back from the shared header, which the peer may change.
namespace {
struct Geometry {
    uint32_t ring_size, header_size;
};
} // namespace

static void setup_endpoint(Vi *vi, Endpoint *ep, int side, int sock, int peer_efd, pid_t peer_pid,
                           Geometry g, bool can_access) {
    ConnHeader *h = ep->hdr;
    ep->me = &h->end[side];
    ep->peer = &h->end[1 - side];
    uint8_t *base = reinterpret_cast<uint8_t *>(h) + g.header_size;
    ep->out = base + static_cast<size_t>(side) * g.ring_size;
    ep->in = base + static_cast<size_t>(1 - side) * g.ring_size;
    ep->ring_size = g.ring_size;
    ep->mask = g.ring_size - 1;
    ep->produced = ep->peer_consumed = ep->acked = ep->consumed = ep->next_rewind = 0;
    ep->rewound_from = ep->rewound_to = 0;
    ep->sock = sock;
    ep->peer_efd = peer_efd;
    ep->peer_pid = peer_pid;
    ep->can_access_peer = can_access && !ep->peer->shareable;
    ep->peer_can_access_me = ep->peer->can_access && !vi->shareable;
    ep->reliability = vi->attrs.ReliabilityLevel;
    const ShmConfig &cfg = config();
    ep->copy_threshold = cfg.copy_threshold;
    ep->get_align = cfg.get_align;
    ep->force_doorbell = cfg.force_doorbell;
    ep->frag = Endpoint::Frag::none;
    ep->read_resp_sent = 0;
    ep->next_liveness = 0;
    ep->up = true;
    hold_endpoint(vi, ep);
}

// Acceptor side: creates the connection memory and completes the handshake.
VIP_RETURN offer(Vi *vi, int sock, const Hello &hello, pid_t peer_pid, VIP_VI_ATTRIBUTES *rattrs) {
    Endpoint *ep = endpoint(vi);
    uint32_t ring = config().ring_size;
    uint32_t header = static_cast<uint32_t>(round_line(sizeof(ConnHeader)));
    size_t size = (static_cast<size_t>(header) + 2ull * ring + 4095) & ~size_t(4095);
    int memfd = fd_track(memfd_create("vipl-conn", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    // Sealed before the peer has it: it can neither shrink the memory under us (every
    // access here would fault) nor grow it.
    if (memfd < 0 || ftruncate(memfd, static_cast<off_t>(size)) < 0 ||
        fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        VIPL_ERROR("connection memory: %s", strerror(errno));
        if (memfd >= 0) fd_close(memfd);
        return VIP_ERROR_RESOURCE;
    }
    void *map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    // A fork child holds nothing of a private VI's connection.
    if (map != MAP_FAILED && !vi->shareable) madvise(map, size, MADV_DONTFORK);
    if (map == MAP_FAILED) {
        VIPL_ERROR("connection memory: %s", strerror(errno));
        fd_close(memfd);
        return VIP_ERROR_RESOURCE;
    }
    auto *h = new (map) ConnHeader{};
    h->magic = kMagic;
    h->version = kVersion;
    h->ring_size = ring;
    h->header_size = header;
    bool can_access = fill_own_end(vi, &h->end[0], peer_pid, hello.probe);

    Answer a = make_msg<Answer>(kMsgAccept, vi->nic);
    a.attrs = wire_attrs(vi->attrs);
    a.probe = probe_address();
    a.ring_size = ring;
    a.header_size = header;
    a.regions = vi->nic->regions.max();
    a.map_size = size;
    int fds[3] = {memfd, vi->efd, vi->nic->regions.fd()};
    bool sent = send_with_fds(sock, &a, sizeof a, fds, 3);
    fd_close(memfd);
    Ack ack{};
    int got[2] = {-1, -1};
    int ngot = 0;
    // Not interruptible: the requester may have connected already.
    Recv r = sent ? recv_msg(sock, &ack, sizeof ack, got, 2, &ngot,
                             now_ns() + vipl::config().connect_ack_ms * 1000000ull, false)
                  : Recv::error;
    if (r == Recv::no_room) {
        VIPL_ERROR("connection from pid %d: no descriptor left for its handshake", peer_pid);
        close_fds(got, ngot);
        munmap(map, size);
        return VIP_ERROR_RESOURCE;
    }
    if (r != Recv::ok || ngot != 2 || ack.magic != kMagic || ack.type != kMsgAck) {
        VIPL_INFO("connection request abandoned by pid %d before the handshake ended", peer_pid);
        close_fds(got, ngot);
        munmap(map, size);
        return VIP_TIMEOUT;
    }
    if (!is_doorbell(got[0], vi->efd)) {
        VIPL_ERROR("connection from pid %d: its doorbell is not a non-blocking eventfd", peer_pid);
        close_fds(got, ngot);
        munmap(map, size);
        return VIP_ERROR_RESOURCE;
    }
    PeerRegions *pr =
        peer_regions_acquire(hello.nic_id, peer_pid, got[1], ack.regions, vi->shareable);
    fd_close(got[1]);
    if (!pr) {
        fd_close(got[0]);
        munmap(map, size);
        return VIP_ERROR_RESOURCE;
    }
    ep->map = map;
    ep->map_size = size;
    ep->hdr = h;
    ep->peer_regions = pr;
    setup_endpoint(vi, ep, 0, sock, got[0], peer_pid, Geometry{ring, header}, can_access);
    fill_attrs(hello.attrs, &ep->peer_attrs);
    if (rattrs) *rattrs = ep->peer_attrs;
    return VIP_SUCCESS;
}

// Requester side: maps the memory the acceptor offered and finishes the handshake.
static VIP_RETURN join(Vi *vi, int sock, const Answer &a, int fds[3], VIP_VI_ATTRIBUTES *rattrs) {
    Endpoint *ep = endpoint(vi);
    // The acceptor's pid as the kernel knows it: cross-memory attach goes to that
    // process only, whatever pid the Answer claims (0, from another pid namespace:
    // none then, the probe fails).
    ucred cred{};
    socklen_t cl = sizeof cred;
    bool sane = a.magic == kMagic && a.version == kVersion && a.ring_size >= 2048 &&
                a.ring_size <= (1u << 30) && !(a.ring_size & (a.ring_size - 1)) &&
                a.header_size >= sizeof(ConnHeader) && a.header_size % kLine == 0 &&
                a.header_size <= (1u << 20) && a.map_size >= a.header_size + 2ull * a.ring_size &&
                a.map_size < (1ull << 32) && sealed_memfd(fds[0], a.map_size) &&
                is_doorbell(fds[1], vi->efd) &&
                getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0;
    void *map = sane ? mmap(nullptr, a.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0)
                     : MAP_FAILED;
    fd_close(fds[0]);
    if (map != MAP_FAILED && !vi->shareable) madvise(map, a.map_size, MADV_DONTFORK);
    auto *h = static_cast<ConnHeader *>(map);
    if (sane && map == MAP_FAILED) {
        VIPL_ERROR("cannot map a connection's memory: %s", strerror(errno));
        fd_close(fds[1]);
        fd_close(fds[2]);
        return VIP_ERROR_RESOURCE;
    }
    if (map == MAP_FAILED || h->magic != kMagic || h->ring_size != a.ring_size ||
        h->header_size != a.header_size) {
        VIPL_ERROR("malformed connection offer from pid %u", a.pid);
        if (map != MAP_FAILED) munmap(map, a.map_size);
        fd_close(fds[1]);
        fd_close(fds[2]);
        return VIP_ERROR_RESOURCE;
    }
    PeerRegions *pr = peer_regions_acquire(a.nic_id, cred.pid, fds[2], a.regions, vi->shareable);
    fd_close(fds[2]);
    if (!pr) {
        munmap(map, a.map_size);
        fd_close(fds[1]);
        return VIP_ERROR_RESOURCE;
    }
    bool can_access = fill_own_end(vi, &h->end[1], cred.pid, a.probe);
    Ack ack = make_msg<Ack>(kMsgAck, vi->nic);
    ack.regions = vi->nic->regions.max();
    int mine[2] = {vi->efd, vi->nic->regions.fd()};
    if (!send_with_fds(sock, &ack, sizeof ack, mine, 2)) {
        peer_regions_release(pr, vi->shareable);
        munmap(map, a.map_size);
        fd_close(fds[1]);
        return VIP_REJECT;
    }
    ep->map = map;
    ep->map_size = a.map_size;
    ep->hdr = h;
    ep->peer_regions = pr;
    setup_endpoint(vi, ep, 1, sock, fds[1], cred.pid, Geometry{a.ring_size, a.header_size},
                   can_access);
    fill_attrs(a.attrs, &ep->peer_attrs);
    if (rattrs) *rattrs = ep->peer_attrs;
    return VIP_SUCCESS;
}

void send_reject(int sock, VIP_RETURN reason) {
    Answer a = make_msg<Answer>(kMsgReject, nullptr);
    a.reason = reason;
    send_with_fds(sock, &a, sizeof a, nullptr, 0);
}

// Waits for the acceptor's answer (without block: looks whether it has
// come, VIP_TIMEOUT if not); the connection is made on Accept.
VIP_RETURN await_answer(Vi *vi, int sock, uint64_t deadline, VIP_VI_ATTRIBUTES *rattrs,
                        bool block) {
    Answer a{};
    int fds[3] = {-1, -1, -1};
    int n = 0;
    switch (block ? recv_msg(sock, &a, sizeof a, fds, 3, &n, deadline, true)
                  : util::recv_with_fds(sock, &a, sizeof a, fds, 3, &n)) {
    case Recv::ok:
        break;
    case Recv::timeout:
    case Recv::again:
        close_fds(fds, n);
        return VIP_TIMEOUT;
    case Recv::interrupted:
        close_fds(fds, n);
        return VIP_INTERRUPTED;
    case Recv::no_room:
        VIPL_ERROR("connection: no descriptor left for the handshake");
        close_fds(fds, n);
        return VIP_ERROR_RESOURCE;
    case Recv::eof:
    case Recv::error:
        close_fds(fds, n);
        return VIP_REJECT;
    }
    if (a.magic != kMagic || a.type == kMsgReject || a.type != kMsgAccept || n != 3) {
        close_fds(fds, n);
        if (a.magic == kMagic && a.type == kMsgReject && a.reason != VIP_SUCCESS && a.reason < 32)
            return static_cast<VIP_RETURN>(a.reason);
        return VIP_REJECT;
    }
    return join(vi, sock, a, fds, rattrs);
}

// connect() to an abstract name: 0, or the errno.
int connect_name(int sock, const std::string &name) {
    sockaddr_un sa;
    socklen_t len = util::abstract_address(name, &sa);
    if (len == 0) return ENAMETOOLONG;
    return connect(sock, reinterpret_cast<sockaddr *>(&sa), len) == 0 ? 0 : errno;
}

bool same_disc(const uint8_t *a, uint16_t alen, const uint8_t *b, uint16_t blen) {
    return alen == blen && memcmp(a, b, alen) == 0;
}

} // namespace vipl::shm
