#include "core/segments.h"

#include <algorithm>
#include <cstring>

namespace vipl {

int segments_to_iov(const Segment *segs, uint32_t nseg, uint64_t offset, uint64_t len, iovec *iov,
                    int max) {
    int n = 0;
    for (uint32_t i = 0; i < nseg && len && n < max; ++i) {
        if (offset >= segs[i].len) {
            offset -= segs[i].len;
            continue;
        }
        uint64_t take = std::min(segs[i].len - offset, len);
        iov[n++] = iovec{reinterpret_cast<void *>(segs[i].addr + offset), take};
        len -= take;
        offset = 0;
    }
    return n;
}

void gather_list(uint8_t *dst, const Segment *segs, uint32_t nseg, uint64_t offset, uint64_t len) {
    for (uint32_t i = 0; i < nseg && len; ++i) {
        if (offset >= segs[i].len) {
            offset -= segs[i].len;
            continue;
        }
        uint64_t take = std::min(segs[i].len - offset, len);
        memcpy(dst, reinterpret_cast<const void *>(segs[i].addr + offset), take);
        dst += take;
        len -= take;
        offset = 0;
    }
}

void scatter_list(const Segment *segs, uint32_t nseg, uint64_t offset, const uint8_t *src,
                  uint64_t len) {
    for (uint32_t i = 0; i < nseg && len; ++i) {
        if (offset >= segs[i].len) {
            offset -= segs[i].len;
            continue;
        }
        uint64_t take = std::min(segs[i].len - offset, len);
        memcpy(reinterpret_cast<void *>(segs[i].addr + offset), src, take);
        src += take;
        len -= take;
        offset = 0;
    }
}

bool target_allows(Vi *vi, VIP_MEM_HANDLE h, uint64_t addr, uint64_t len, bool write) {
    if (!(write ? vi->attrs.EnableRdmaWrite : vi->attrs.EnableRdmaRead)) return false;
    uint32_t need = write ? kRegionRdmaWrite : kRegionRdmaRead;
    return vi->nic->regions.covers(h, vi->ptag_id, addr, len, need);
}

} // namespace vipl
