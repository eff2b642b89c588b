// What the core hands a provider to post: a descriptor it has checked, with its
// segments resolved.  The core's own helpers (segments.h, vi.h) take these too.
#pragma once

#include <vipl.h>

#include <cstdint>

namespace vipl {

struct Segment {
    uint64_t addr;
    uint64_t len;
};

// A descriptor after the core has checked it: segments are inside regions of
// the VI's ptag and add up to `length`.
struct PostedDesc {
    VIP_DESCRIPTOR *desc;
    uint16_t op; // VIP_CONTROL_OP_*
    bool imm;
    bool fence;
    uint32_t imm_data;
    uint64_t length;
    uint32_t nseg;
    const Segment *segs;
    uint64_t raddr;         // RDMA: remote address
    VIP_MEM_HANDLE rhandle; // RDMA: remote region
};

} // namespace vipl
