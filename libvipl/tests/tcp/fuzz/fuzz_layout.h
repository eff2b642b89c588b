// What fuzz_stream inputs can name: the VI's memory sits at a fixed address,
// registered page by page in a fixed order on a fresh NIC, so addresses and
// region handles are constants that gen_corpus writes into the seeds.
//
// Input of fuzz_stream: two configuration bytes, then the raw bytes the peer
// sends once the handshake is over.
#pragma once

#include <cstdint>

namespace vt {

constexpr uint64_t kPage = 4096;
// Clear of AddressSanitizer's shadow and allocator ranges on x86-64.
constexpr uint64_t kBase = 0x4a0000000000ull;

// One page each, registered in this order (all but the last).
enum Page : uint32_t {
    kDescPage,         // descriptors
    kRecvPage,         // receive buffers, gaps between segments
    kCanaryLoPage,     // no RDMA, just below the window
    kWindowPage,       // RDMA write and read
    kCanaryHiPage,     // no RDMA, just above the window
    kReadOnlyPage,     // RDMA read only
    kLocalPage,        // buffers of the VI's own operations
    kUnregisteredPage, // never registered
    kPageCount,
};
constexpr uint32_t kRegisteredPages = kUnregisteredPage;

constexpr uint64_t page_addr(uint32_t p) {
    return kBase + p * kPage;
}
// The handle VipRegisterMem returns for page p: index p, first generation.
// The harness checks this at start-up.
constexpr uint32_t page_handle(uint32_t p) {
    return (1u << 20) | p;
}

// First configuration byte.
constexpr uint8_t kCfgReliability = 0x03; // 0 unreliable, 1 delivery, 2 reception, 3 delivery
constexpr uint8_t kCfgRecvShift = 2;      // bits 2-4: receives posted (0-7)
constexpr uint8_t kCfgRecvMask = 0x1c;
constexpr uint8_t kCfgOwnOps = 0x20; // the VI posts a send, an RDMA write, an RDMA read (reliable)
constexpr uint8_t kCfgLargeMtu = 0x40; // MaxTransferSize kMtuLarge, else kMtuSmall
constexpr uint8_t kCfgImm = 0x80;      // its send and RDMA write carry immediate data
// Second configuration byte (other bits are ignored).
constexpr uint8_t kCfgSmallWindow = 0x01; // the peer offers the smallest flow-control window

constexpr uint64_t kMtuSmall = 1024;
constexpr uint64_t kMtuLarge = 65536;

// Receive descriptor i sits in slot i of the descriptor page; its buffers
// are in stretch i of the receive page: two segments for even i, three for
// odd i (the latter are parsed again at delivery).
struct Seg {
    uint32_t offset, length;
};
constexpr uint32_t kDescStride = 128;
constexpr uint32_t kRecvStride = 512;
constexpr int kMaxRecvs = 7;
constexpr Seg kRecvSegs2[] = {{32, 160}, {256, 160}};
constexpr Seg kRecvSegs3[] = {{32, 96}, {160, 96}, {288, 96}};

// The VI's own operations (kCfgOwnOps): descriptors in these slots, buffers
// on the local page.  Sequence numbers of acknowledged messages: the send
// (reliable reception only) comes first, then the RDMA write.
constexpr uint32_t kSendSlot = 8, kWriteSlot = 9, kReadSlot = 10;
constexpr uint32_t kOwnLength = 64;
constexpr uint32_t kSendSource = 0; // offset in the local page
constexpr uint32_t kReadDest = 1024;
constexpr uint64_t kPeerAddr = 0x10000; // the peer's memory, as far as the VI knows
constexpr uint32_t kPeerHandle = 0x55;
constexpr uint32_t kOwnImm = 0xfeedf00d;

} // namespace vt
