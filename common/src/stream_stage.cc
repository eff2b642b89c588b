// Stream::Impl: staged writes.  A large copied write goes through a registered stage
// that the reader RDMA-reads from, instead of through the send buffers.
//
// Why: a data message larger than a few hundred bytes is itself moved by the transport
// as an RDMA read (libvipl's SEND-GET) into a receive buffer, and the reader then copies
// it out: two copies on the reader's CPU against the writer's one, so the reader bounds
// the stream at less than half of what the VI carries.  A staged part is read once,
// straight into a blocking reader's buffer (stream_zcopy.cc: read_direct), while the
// writer copies the next part: one copy on each side, at the same time.
#include "stream_impl.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace vipl {

bool Stream::Impl::stage_allowed() {
    const State &t = *st;
    // The peer's first message says whether it takes rts (a shareable peer does not).
    if (shared || !peer_reads_alone || stage_failed || !opt.hold_back ||
        nonblocking.load(std::memory_order_relaxed) || !t.heard || t.peer_no_rts)
        return false;
    if (stage) return true;
    const size_t size = size_t{kStagePart} * kStageParts;
    void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        stage_failed = true;
        return false;
    }
    VIP_MEM_ATTRIBUTES ma{};
    ma.Ptag = nic->ptag();
    ma.EnableRdmaRead = VIP_TRUE;
    if (VipRegisterMem(nic->handle(), p, size, &ma, &stage_mh) != VIP_SUCCESS) {
        munmap(p, size); // e.g. the NIC's registration limits: copy as before
        stage_failed = true;
        return false;
    }
    stage = static_cast<std::byte *>(p);
    return true;
}

bool Stream::Impl::stage_room() const {
    return stage_busy != (1u << kStageParts) - 1 && !st->free_slots.empty();
}

size_t Stream::Impl::stage_write(const std::byte *src, size_t len) {
    State &t = *st;
    uint32_t part = 0;
    while (stage_busy & (1u << part)) ++part;
    std::byte *dst = stage + size_t{part} * kStagePart;
    auto k = static_cast<uint32_t>(std::min<size_t>(len, kStagePart));
    std::memcpy(dst, src, k);
    stage_busy |= 1u << part;
    // The rts itself goes from a send buffer, behind what is queued already.
    t.pending.push_back({t.free_slots.back(), k, dst});
    t.free_slots.pop_back();
    return k;
}

void Stream::Impl::offered_push(int part) {
    offered[(offered_head + offered_n) % kRtsMax] = static_cast<int8_t>(part);
    offered_n++;
}

void Stream::Impl::offered_pop() {
    if (offered_n == 0) return;
    int part = offered[offered_head];
    offered_head = (offered_head + 1) % kRtsMax;
    offered_n--;
    if (part >= 0) stage_busy &= ~(1u << part);
}

void Stream::Impl::stage_release() noexcept {
    if (!stage) return;
    // A fork child holds the parent's NIC in name only: the registration is the parent's.
    if (nic && getpid() == owner_pid) VipDeregisterMem(nic->handle(), stage, stage_mh);
    munmap(stage, size_t{kStagePart} * kStageParts);
    stage = nullptr;
    stage_busy = 0;
    offered_n = 0;
}

} // namespace vipl
