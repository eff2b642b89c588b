// Life of a shm endpoint: creation, teardown, peers' region tables, probing
// whether cross-memory attach works between two processes.
#include "core/arena.h"
#include "core/config.h"
#include "core/fds.h"
#include "core/lifecycle.h"
#include "core/log.h"
#include "core/vi.h"
#include "prov/shm/shm.h"
#include "prov/shm/shm_config.h"
#include "prov/util/endpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <vector>

namespace vipl::shm {
namespace {

// A pattern a peer reads with process_vm_readv to learn whether it may.
const uint64_t kProbe[2] = {0x76697066726f6265ull, 0x0123456789abcdefull};

Mutex g_peer_lock;
std::vector<PeerRegions *> g_peers;

// The lock is held across fork() so a child never inherits it taken.
struct ForkHook {
    ForkHook() {
        pthread_atfork([] { g_peer_lock.lock(); }, [] { g_peer_lock.unlock(); }, child);
    }
    // The child has the tables that shareable VIs use, mapped; the rest were
    // never mapped in it (MADV_DONTFORK).
    static void child() {
        g_peer_lock.unlock();
        auto gone = [](PeerRegions *p) { return p->shared_refs == 0; };
        for (PeerRegions *p : g_peers) p->refs = p->shared_refs;
        g_peers.erase(std::remove_if(g_peers.begin(), g_peers.end(), gone), g_peers.end());
    }
};
ForkHook g_fork_hook;

} // namespace

uint64_t probe_address() {
    return reinterpret_cast<uint64_t>(kProbe);
}

bool cross_memory_attach_works(pid_t pid, uint64_t probe_addr) {
    if (!config().cma) return false;
    uint64_t got[2] = {0, 0};
    iovec local{got, sizeof got};
    iovec remote{reinterpret_cast<void *>(probe_addr), sizeof got};
    int saved = errno;
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    errno = saved;
    return n == sizeof got && got[0] == kProbe[0] && got[1] == kProbe[1];
}

PeerRegions *peer_regions_acquire(uint64_t nic_id, pid_t pid, int fd, uint32_t count,
                                  bool shareable) {
    std::lock_guard<Mutex> g(g_peer_lock);
    for (PeerRegions *p : g_peers)
        if (p->nic_id == nic_id && p->pid == pid) {
            ++p->refs;
            if (shareable && p->shared_refs++ == 0)
                madvise(const_cast<RegionEntry *>(p->entries),
                        static_cast<size_t>(p->count) * sizeof(RegionEntry), MADV_DOFORK);
            return p;
        }
    size_t size = static_cast<size_t>(count) * sizeof(RegionEntry);
    // The peer owns the memfd: unless it is sealed against shrinking and long
    // enough, a later ftruncate would make every check against it fault here.
    struct stat sb;
    int seals = fcntl(fd, F_GET_SEALS);
    if (count == 0 || count > (1u << 24) || seals < 0 || !(seals & F_SEAL_SHRINK) ||
        fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || static_cast<uint64_t>(sb.st_size) < size) {
        VIPL_ERROR("a peer's region table is not a sealed memfd of %u entries", count);
        return nullptr;
    }
    void *m = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        VIPL_ERROR("cannot map a peer's region table: %s", strerror(errno));
        return nullptr;
    }
    madvise(m, size, MADV_DONTFORK);
    auto *p = new PeerRegions;
    p->entries = static_cast<const RegionEntry *>(m);
    p->count = count;
    p->nic_id = nic_id;
    p->pid = pid;
    p->refs = 1;
    p->shared_refs = shareable ? 1 : 0;
    if (shareable) madvise(m, size, MADV_DOFORK);
    g_peers.push_back(p);
    return p;
}

void peer_regions_release(PeerRegions *p, bool shareable) {
    if (!p) return;
    std::lock_guard<Mutex> g(g_peer_lock);
    if (shareable && p->shared_refs > 0) --p->shared_refs;
    if (--p->refs > 0) return;
    munmap(const_cast<RegionEntry *>(p->entries),
           static_cast<size_t>(p->count) * sizeof(RegionEntry));
    for (auto it = g_peers.begin(); it != g_peers.end(); ++it)
        if (*it == p) {
            g_peers.erase(it);
            break;
        }
    delete p;
}

bool peer_region(const PeerRegions *p, VIP_MEM_HANDLE h, RegionEntry *out) {
    uint32_t i = region_index(h);
    if (!p || i >= p->count) return false;
    const RegionEntry &e = p->entries[i];
    for (int tries = 0; tries < 1000; ++tries) {
        uint32_t s1 = e.seq.load(std::memory_order_acquire);
        if (s1 & 1) continue;
        out->gen = e.gen;
        out->base = e.base;
        out->length = e.length;
        out->ptag = e.ptag;
        uint32_t flags = e.flags.load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (e.seq.load(std::memory_order_relaxed) != s1) continue;
        out->flags.store(flags, std::memory_order_relaxed);
        return (flags & kRegionLive) && out->gen == region_gen(h);
    }
    return false;
}

VIP_RETURN vi_create(Vi *vi) {
    // A shareable VI's transport state is shared with its holders too.
    void *mem = object_alloc(sizeof(Endpoint), vi->shareable);
    if (!mem) return VIP_ERROR_RESOURCE;
    vi->prov = new (mem) Endpoint;
    return VIP_SUCCESS;
}

void leave(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (!ep) return;
    // RDMA initiators reach this end's memory through a holder's pid: hand
    // that role to a holder that stays (shareable memory is the same in all).
    // The core closes our copies of the descriptors and the mapping.
    if (ep->up && ep->me && ep->me->pid == static_cast<uint32_t>(self_pid()))
        for (int i = 0; i < Holders::kMax; ++i) {
            uint64_t t = vi->holders->token[i].load(std::memory_order_acquire);
            int32_t pid = vi->holders->pid[i].load(std::memory_order_acquire);
            if (t && t != self_token() && pid > 0) {
                ep->me->pid = static_cast<uint32_t>(pid);
                break;
            }
        }
}

void abandon(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return;
    ep->me->reason.store(VIP_ERROR_CONN_LOST, std::memory_order_relaxed);
    ep->me->broken_at.store(UINT64_MAX, std::memory_order_relaxed);
    ep->me->state.store(kEndBroken, std::memory_order_release);
    ring_peer(vi, ep, kWakeAny);
    transport_down(vi, ep);
}

void transport_down(Vi *vi, Endpoint *ep) {
    // The hang-up reaches the peer and every holder at once, whoever still
    // has a copy of the socket; each holder closes its copies (vi_drop_copies).
    if (ep->sock >= 0) shutdown(ep->sock, SHUT_RDWR);
    vi_drop_copies(vi);
    Endpoint fresh;
    fresh.p2p = ep->p2p;
    *ep = fresh;
    vi_transport_gone(vi);
}

VIP_RETURN endpoints(Vi *vi, VIP_VI_ENDPOINTS *out) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up || ep->sock < 0) return VIP_INVALID_STATE;
    // The kernel's word on who is at the other end of the handshake socket,
    // not the pid the peer wrote in its Hello.
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(ep->sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return VIP_INVALID_STATE;
    VIP_VI_ENDPOINTS e{};
    e.Kind = VIP_ENDPOINTS_LOCAL;
    e.PeerPid = cred.pid;
    e.PeerUid = cred.uid;
    e.PeerGid = cred.gid;
    e.HostAddressLen = kHostAddressLen;
    memcpy(e.HostAddress, vi->nic->address, kHostAddressLen);
    e.PeerReadsAlone = ep->peer_can_access_me ? VIP_TRUE : VIP_FALSE;
    *out = e;
    return VIP_SUCCESS;
}

void disconnect(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (!ep) return;
    p2p_free(ep);
    if (ep->up && ep->me) {
        ep->me->state.store(kEndClosed, std::memory_order_release);
        // The socket's hang-up wakes a sleeping peer; an awake one sees the state.
    }
    transport_down(vi, ep);
}

void vi_destroy(Vi *vi) {
    util::destroy_endpoint(vi, endpoint(vi), disconnect);
}

void hold_endpoint(Vi *vi, Endpoint *ep) {
    vi_hold_fd(vi, ep->sock);
    vi_hold_fd(vi, ep->peer_efd);
    vi_hold_map(vi, ep->map, ep->map_size);
    vi_hold_aux(vi, ep->peer_regions);
}

void drop_peer_regions(Vi *vi, void *p) {
    peer_regions_release(static_cast<PeerRegions *>(p), vi->shareable);
}

} // namespace vipl::shm
