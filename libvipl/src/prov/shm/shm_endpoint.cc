// Life of a shm endpoint: creation, teardown, peers' region tables, probing
// whether cross-memory attach works between two processes.
#include "core/arena.h"
#include "core/config.h"
#include "core/fds.h"
#include "core/lifecycle.h"
#include "core/log.h"
#include "core/vi.h"
#include "prov/shm/shm.h"

#include <cerrno>
#include <cstring>
#include <pthread.h>
#include <sys/mman.h>
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
        pthread_atfork([] { g_peer_lock.lock(); }, [] { g_peer_lock.unlock(); },
                       [] { g_peer_lock.unlock(); });
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

PeerRegions *peer_regions_acquire(uint64_t nic_id, int fd, uint32_t count) {
    std::lock_guard<Mutex> g(g_peer_lock);
    for (PeerRegions *p : g_peers)
        if (p->nic_id == nic_id) {
            ++p->refs;
            return p;
        }
    size_t size = static_cast<size_t>(count) * sizeof(RegionEntry);
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
    p->refs = 1;
    g_peers.push_back(p);
    return p;
}

void peer_regions_release(PeerRegions *p) {
    if (!p) return;
    std::lock_guard<Mutex> g(g_peer_lock);
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
    if (ep->up && ep->me && ep->me->pid == static_cast<uint32_t>(self_pid()))
        for (int i = 0; i < Holders::kMax; ++i) {
            uint64_t t = vi->holders->token[i].load(std::memory_order_acquire);
            int32_t pid = vi->holders->pid[i].load(std::memory_order_acquire);
            if (t && t != self_token() && pid > 0) {
                ep->me->pid = static_cast<uint32_t>(pid);
                break;
            }
        }
    // Our copies only: the holders that stay keep theirs, and the state.
    if (ep->sock >= 0) close(ep->sock);
    if (ep->peer_efd >= 0) close(ep->peer_efd);
    if (ep->map) munmap(ep->map, ep->map_size);
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
    if (ep->sock >= 0) vi_transport_closing(vi);
    if (ep->sock >= 0) fd_close(ep->sock);
    if (ep->peer_efd >= 0) fd_close(ep->peer_efd);
    if (ep->map) munmap(ep->map, ep->map_size);
    peer_regions_release(ep->peer_regions);
    Endpoint fresh;
    fresh.p2p = ep->p2p;
    *ep = fresh;
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
    Endpoint *ep = endpoint(vi);
    if (!ep) return;
    disconnect(vi);
    ep->~Endpoint();
    object_free(ep, sizeof(Endpoint), vi->shareable);
    vi->prov = nullptr;
}

void share_endpoint(Vi *vi, Endpoint *ep) {
    if (!vi->shareable) return;
    fd_share(ep->sock);
    fd_share(ep->peer_efd);
    if (ep->peer_regions)
        madvise(const_cast<RegionEntry *>(ep->peer_regions->entries),
                static_cast<size_t>(ep->peer_regions->count) * sizeof(RegionEntry), MADV_DOFORK);
}

} // namespace vipl::shm
