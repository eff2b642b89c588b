#include "core/fds.h"
#include "core/log.h"
#include "core/objects.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace vipl {

#ifdef F_SEAL_FUTURE_WRITE
constexpr int kSealFutureWrite = F_SEAL_FUTURE_WRITE;
#else
constexpr int kSealFutureWrite = 0x0010; // Linux 5.1
#endif

bool RegionTable::init(uint32_t max_regions) {
    max_ = max_regions;
    size_t size = map_size();
    // A memfd rather than anonymous memory: providers map it read-only into
    // peers that check RDMA against it.  Untouched pages cost nothing.
    fd_ = fd_track(memfd_create("vipl-regions", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(size)) < 0) {
        VIPL_ERROR("cannot create the region table: %s", strerror(errno));
        destroy();
        return false;
    }
    void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) {
        VIPL_ERROR("cannot map the region table: %s", strerror(errno));
        destroy();
        return false;
    }
    // Peers get the descriptor, which is open for writing: sealed, none of them can
    // map the table writable (and grant itself RDMA into any of our memory), nor
    // shrink it under us.  This mapping stays writable.
    if (fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | kSealFutureWrite | F_SEAL_SEAL) < 0) {
        VIPL_ERROR("cannot seal the region table: %s", strerror(errno));
        munmap(p, size);
        destroy();
        return false;
    }
    // Children need it only for shareable VIs (share_with_children).
    madvise(p, size, MADV_DONTFORK);
    shared_ = false;
    entries_ = static_cast<RegionEntry *>(p);
    next_ = count_ = 0;
    bytes_ = 0;
    free_.clear();
    return true;
}

void RegionTable::destroy() {
    if (entries_) munmap(entries_, map_size());
    if (fd_ >= 0) fd_close(fd_);
    entries_ = nullptr;
    fd_ = -1;
    max_ = 0;
}

VIP_RETURN RegionTable::add(uint64_t base, uint64_t len, uint32_t ptag, uint32_t flags,
                            VIP_MEM_HANDLE *out) {
    uint32_t i;
    if (!free_.empty()) {
        i = free_.back();
        free_.pop_back();
    } else {
        if (next_ >= max_) return VIP_ERROR_RESOURCE;
        i = next_++;
    }
    RegionEntry &e = entries_[i];
    e.seq.fetch_add(1, std::memory_order_acq_rel); // odd: changing
    e.gen = e.gen % 4095 + 1;
    e.base = base;
    e.length = len;
    e.ptag = ptag;
    e.flags.store(flags | kRegionLive, std::memory_order_release);
    e.seq.fetch_add(1, std::memory_order_release);
    ++count_;
    bytes_ += len;
    *out = (e.gen << kRegionIndexBits) | i;
    return VIP_SUCCESS;
}

void RegionTable::remove(VIP_MEM_HANDLE h) {
    uint32_t i = region_index(h);
    RegionEntry &e = entries_[i];
    e.seq.fetch_add(1, std::memory_order_acq_rel);
    e.flags.store(0, std::memory_order_release);
    bytes_ -= e.length;
    e.seq.fetch_add(1, std::memory_order_release);
    --count_;
    free_.push_back(i);
}

void RegionTable::set(VIP_MEM_HANDLE h, uint32_t ptag, uint32_t flags) {
    RegionEntry &e = entries_[region_index(h)];
    e.seq.fetch_add(1, std::memory_order_acq_rel);
    e.ptag = ptag;
    e.flags.store(flags | kRegionLive, std::memory_order_release);
    e.seq.fetch_add(1, std::memory_order_release);
}

void RegionTable::share_with_children() {
    if (shared_ || !entries_) return;
    madvise(entries_, map_size(), MADV_DOFORK);
    fd_share(fd_); // a child connecting a shareable VI hands it to the peer
    shared_ = true;
}

void RegionTable::drop_inherited() {
    if (!shared_) return;
    if (entries_) munmap(entries_, map_size());
    if (fd_ >= 0) fd_close(fd_);
    entries_ = nullptr;
    fd_ = -1;
    max_ = 0; // nothing is found in it any more
    shared_ = false;
}

void RegionTable::set_live(VIP_MEM_HANDLE h, bool live) {
    RegionEntry &e = entries_[region_index(h)];
    e.seq.fetch_add(1, std::memory_order_acq_rel);
    uint32_t f = e.flags.load(std::memory_order_relaxed);
    e.flags.store(live ? (f | kRegionLive) : (f & ~kRegionLive), std::memory_order_release);
    e.seq.fetch_add(1, std::memory_order_release);
}

} // namespace vipl
