// Segment lists: copies between them and linear buffers, iovecs over them,
// and the target-side RDMA check every provider applies.
#pragma once

#include "core/objects.h"
#include "core/posted.h"

#include <cstring>
#include <sys/uio.h>

namespace vipl {

// Fills iov with up to len bytes of segs starting at byte offset; returns
// how many entries it used (at most max).
int segments_to_iov(const Segment *segs, uint32_t nseg, uint64_t offset, uint64_t len, iovec *iov,
                    int max);
// Copies between a linear buffer and a segment list, starting at byte offset.
void gather_list(uint8_t *dst, const Segment *segs, uint32_t nseg, uint64_t offset, uint64_t len);
void scatter_list(const Segment *segs, uint32_t nseg, uint64_t offset, const uint8_t *src,
                  uint64_t len);
inline void gather(uint8_t *dst, const Segment *segs, uint32_t nseg, uint64_t offset,
                   uint64_t len) {
    if (nseg == 1 && offset == 0 && len <= segs[0].len)
        memcpy(dst, reinterpret_cast<const void *>(segs[0].addr), len);
    else
        gather_list(dst, segs, nseg, offset, len);
}
inline void scatter(const Segment *segs, uint32_t nseg, uint64_t offset, const uint8_t *src,
                    uint64_t len) {
    if (nseg == 1 && offset == 0 && len <= segs[0].len)
        memcpy(reinterpret_cast<void *>(segs[0].addr), src, len);
    else
        scatter_list(segs, nseg, offset, src, len);
}

// May a peer of vi write (or read) [addr, addr+len) in region h?  The VI must
// enable the operation, and the live region must belong to the VI's ptag,
// enable it too and contain the whole range.
bool target_allows(Vi *vi, VIP_MEM_HANDLE h, uint64_t addr, uint64_t len, bool write);

} // namespace vipl
