// RDMA protection checks against a peer's table, and cross-memory attach copies.
#include "core/segments.h"
#include "prov/shm/shm.h"

#include <cerrno>
#include <cstring>
#include <sys/uio.h>

namespace vipl::shm {

bool remote_allows(Endpoint *ep, VIP_MEM_HANDLE h, uint64_t addr, uint64_t len, bool write) {
    if (!(ep->peer->rdma & (write ? kEndRdmaWrite : kEndRdmaRead))) return false;
    RegionEntry e;
    if (!peer_region(ep->peer_regions, h, &e)) return false;
    uint32_t need = write ? kRegionRdmaWrite : kRegionRdmaRead;
    return (e.flags.load(std::memory_order_relaxed) & need) && e.ptag == ep->peer->ptag &&
           addr >= e.base && len <= e.length && addr - e.base <= e.length - len;
}

namespace {

using CmaFn = ssize_t (*)(pid_t, const iovec *, unsigned long, const iovec *, unsigned long,
                          unsigned long);

// Runs process_vm_readv/writev until len bytes moved, a fault, or the peer is gone.
uint64_t cma_copy(CmaFn fn, pid_t pid, const Segment *local, uint32_t nlocal, const Segment *remote,
                  uint32_t nremote, uint64_t len) {
    uint64_t done = 0;
    int saved = errno;
    while (done < len) {
        iovec liov[256], riov[256];
        int nl = segments_to_iov(local, nlocal, done, len - done, liov, 256);
        int nr = segments_to_iov(remote, nremote, done, len - done, riov, 256);
        if (!nl || !nr) break;
        ssize_t n = fn(pid, liov, nl, riov, nr, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            break;
        }
        done += static_cast<uint64_t>(n);
    }
    errno = saved;
    return done;
}

} // namespace

uint64_t cma_read(pid_t pid, const Segment *local, uint32_t nlocal, const Segment *remote,
                  uint32_t nremote, uint64_t len) {
    if (len == 0) return 0;
    return cma_copy(process_vm_readv, pid, local, nlocal, remote, nremote, len);
}

uint64_t cma_write(pid_t pid, const Segment *local, uint32_t nlocal, uint64_t raddr, uint64_t len) {
    if (len == 0) return 0;
    Segment remote{raddr, len};
    return cma_copy(process_vm_writev, pid, local, nlocal, &remote, 1, len);
}

} // namespace vipl::shm
