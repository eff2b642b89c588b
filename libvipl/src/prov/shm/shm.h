// The same-host provider "shm": private definitions.
//
// A connection is one memfd shared by its two processes only: a header with
// one control block per end, then one ring per direction.  Rings carry
// 64-byte-aligned records; a record is valid when its sequence word matches
// its position, which the producer writes last.  Both processes run the same
// library build (same host), so the layout is raw host order.
#pragma once

#include "core/objects.h"
#include "prov/provider.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <sys/types.h>

namespace vipl::shm {

constexpr uint32_t kMagic = 0x4D485356; // "VSHM"
constexpr uint32_t kVersion = 2;
constexpr uint32_t kLine = 64;
constexpr uint16_t kHostAddressLen = 16;
constexpr uint16_t kMaxDiscriminator = 32;

// ------------------------------------------------------------ shared layout

enum EndState : uint32_t { kEndNone = 0, kEndUp = 1, kEndClosed = 2, kEndBroken = 3 };

enum EndRdma : uint32_t { kEndRdmaWrite = 1, kEndRdmaRead = 2 };

// One end's control block.  Written by its end, except `waiter`, whose armed
// bit the peer clears when it rings the doorbell.
struct alignas(kLine) EndCtl {
    std::atomic<uint64_t> waiter;    // (epoch << 2) | WakeFor bits armed
    std::atomic<uint32_t> state;     // EndState
    std::atomic<uint32_t> reason;    // VIP_ERROR_CODE when broken
    std::atomic<uint64_t> broken_at; // position, in the ring this end reads, of the failed record
    std::atomic<int32_t> cpu;        // CPU this end last waited on
    uint32_t pid;
    uint32_t ptag;       // ptag id of this end's VI (checked by RDMA initiators)
    uint32_t rdma;       // EndRdma bits of this end's VI
    uint32_t can_access; // this end may read/write the peer's memory (cross-memory attach)
    // A shareable VI's memory is never reached by cross-memory attach: the
    // holder whose pid would be used may go (exit, exec) while others stay.
    // RDMA to it and its sends go through the ring.
    uint32_t shareable;
    alignas(kLine) std::atomic<uint64_t> consumed; // bytes of the incoming ring consumed
    // Position in the ring this end writes from which it went back to the ring's start
    // (shm_send.cc: rewind_now); the reader goes there too when it reaches it.
    alignas(kLine) std::atomic<uint64_t> rewound_at;
};

struct ConnHeader {
    uint32_t magic;
    uint32_t version;
    uint32_t ring_size;
    uint32_t header_size;
    alignas(kLine) EndCtl end[2]; // end 0 accepted, end 1 requested
};

enum RecType : uint16_t {
    kPad = 1,       // skip to the start of the ring
    kSend,          // payload inline (COPY-SEND-COPY)
    kSendGet,       // sender's segment list: the receiver reads (SEND-GET)
    kSendFrag,      // a piece of a send (pipelined copy)
    kRdmaWriteImm,  // an RDMA write completed by the initiator carried immediate data
    kRdmaWriteFrag, // a piece of an RDMA write done through the ring
    kRdmaReadReq,   // ask the target to send data back (no cross-memory attach)
    kRdmaReadResp,  // a piece of the answer
    kError,         // the initiator found a protection error on the target's memory
    kRecTypeEnd,
};

enum RecFlags : uint16_t { kRecImm = 1, kRecFirst = 2, kRecLast = 4 };

struct RecHdr {
    std::atomic<uint32_t> seq; // seq_of(position); written last
    uint16_t type;
    uint16_t flags;
    uint32_t len; // payload bytes (kSend, frags), message bytes (kSendGet, kRdmaWriteImm)
    uint32_t imm;
};
static_assert(sizeof(RecHdr) == 16);

struct SendGetBody {
    uint32_t pid;
    uint32_t nseg;
    // followed by nseg Segments
};

struct FragBody {
    uint32_t offset;
    uint32_t total;
    uint64_t raddr; // kRdmaWriteFrag: target address of offset 0
    uint32_t rhandle;
    uint32_t pad;
    // followed by the chunk
};

struct ReadReqBody {
    uint64_t raddr;
    uint32_t rhandle;
    uint32_t total;
    uint64_t req; // initiator's send-queue index
};

struct ReadRespBody {
    uint64_t req;
    uint32_t offset;
    uint32_t total;
    uint32_t status; // 0, or VIP_STATUS_RDMA_PROT_ERROR
    uint32_t pad;
    // followed by the chunk
};

struct ErrorBody {
    uint32_t code; // VIP_ERROR_CODE raised at the target
};

inline uint32_t seq_of(uint64_t pos) {
    return static_cast<uint32_t>(pos / kLine) + 1;
}
// Asks for a cache line in the exclusive state without waiting for it.
inline void prefetch_for_write(const void *p) {
#if defined(__x86_64__)
    // PREFETCHW; processors without it execute it as a no-op.
    asm volatile("prefetchw %0" ::"m"(*static_cast<const char *>(p)));
#else
    __builtin_prefetch(p, 1, 3);
#endif
}

inline uint64_t round_line(uint64_t n) {
    return (n + kLine - 1) & ~static_cast<uint64_t>(kLine - 1);
}

// The peer writes the connection memory whenever it likes: a value the receiver
// checks and then uses must be one read.  This copies it out once; the compiler
// barrier keeps the compiler from reading the shared copy again in its place.
template <class T>
inline T load_once(const void *p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    return v;
}

// A record's header fields, read once after its sequence word matched.
struct Rec {
    uint16_t type;
    uint16_t flags;
    uint32_t len;
    uint32_t imm;
};
inline Rec load_rec(const RecHdr *r) {
    return load_once<Rec>(reinterpret_cast<const uint8_t *>(r) + sizeof(uint32_t));
}
static_assert(sizeof(Rec) == sizeof(RecHdr) - sizeof(uint32_t));

// --------------------------------------------------------- process state

// A peer NIC's region table, mapped read-only (shared by every connection to it).
struct PeerRegions {
    const RegionEntry *entries = nullptr;
    uint32_t count = 0;
    uint64_t nic_id = 0;
    pid_t pid = 0;
    int refs = 0;
    int shared_refs = 0; // of refs, those of shareable VIs (mapped in fork children)
};
// References from shareable VIs are counted apart: a fork child keeps only
// those (the others' mappings are not in it).
// A table is known by the peer's NIC id and the kernel's pid of the peer (a NIC id is
// the peer's word: alone it would let one peer have another's table used for it).
// The memfd must be sealed against shrinking and hold `count` entries: a peer that
// shrank it later would fault every reader.
PeerRegions *peer_regions_acquire(uint64_t nic_id, pid_t pid, int fd, uint32_t count,
                                  bool shareable);
void peer_regions_release(PeerRegions *p, bool shareable);
// ViOps::drop_aux: a VI's reference, dropped with its other copies.
void drop_peer_regions(Vi *vi, void *p);
// Seqlock read of a peer's region entry; false if absent.
bool peer_region(const PeerRegions *p, VIP_MEM_HANDLE h, RegionEntry *out);

struct ShmNic {
    uint64_t id = 0; // random: names this NIC instance to peers
    Mutex lock;
    struct Listener {
        std::string disc;
        int fd;
        // Connections accepted whose request had not all come when the wait
        // that accepted them ended: the next wait goes on with them.
        struct Early {
            int sock;
            uint64_t deadline; // for the request to come
        };
        std::vector<Early> early{};
        // VipGetConnWaitFd's descriptor, made on first use: an epoll set of
        // fd and the early connections, readable when either has something.
        int wait_ep = -1;
    };
    std::vector<Listener> listeners;
};

inline ShmNic *shm_nic(Nic *nic) {
    return static_cast<ShmNic *>(nic->prov);
}

// Connection handshake state of a VI being connected peer-to-peer.
struct P2p;

// Provider state of one VI.
struct Endpoint {
    bool up = false; // transport present (connected, maybe failed later)
    int sock = -1;   // AF_UNIX: handshake, then hang-up detection
    int peer_efd = -1;
    void *map = nullptr;
    size_t map_size = 0;
    ConnHeader *hdr = nullptr;
    EndCtl *me = nullptr;
    EndCtl *peer = nullptr;
    uint8_t *out = nullptr; // ring this end writes
    uint8_t *in = nullptr;  // ring this end reads
    uint32_t ring_size = 0;
    uint64_t mask = 0;
    uint64_t produced = 0;
    uint64_t peer_consumed = 0; // cached peer->consumed, for ring space
    uint64_t next_rewind = 0;   // where ring_reserve next asks whether the ring is empty
    uint64_t rewound_from = 0;  // the last rewind: from where (the peer was there then)
    uint64_t rewound_to = 0;    // and to which lap's start
    uint64_t acked = 0;         // peer->consumed when acknowledgements were last processed
    uint32_t unacked = 0;       // sends waiting for the peer to consume their records
    uint64_t consumed = 0;
    pid_t peer_pid =
        0; // the kernel's (SO_PEERCRED), for cross-memory attach; never the peer's word
    PeerRegions *peer_regions = nullptr;
    bool can_access_peer = false;
    bool peer_can_access_me = false;
    uint16_t reliability = 0;
    uint32_t copy_threshold = 0; // configuration read on the data path, copied at connect
    uint32_t get_align = 1;
    bool force_doorbell = false;
    uint64_t next_liveness = 0;
    uint32_t progress_calls = 0;
    uint64_t waiter_epoch = 0;
    // Receive side: a fragmented message in progress, its total and the offset its
    // next piece must have (pieces come in order, every one with the first's total).
    enum class Frag { none, filling, dropping } frag = Frag::none;
    uint32_t frag_total = 0;
    uint32_t frag_next = 0;
    // Target side of an RDMA read through the ring: the request as first read (the
    // record stays in the ring, the peer's to change, while the answer waits for
    // room) and the bytes of its answer sent.
    ReadReqBody read_req{};
    uint32_t read_resp_sent = 0;
    // The peer broke the protocol where no VI was at hand (its consumed counter):
    // the next progress ends the connection.
    bool peer_lied = false;
    bool stalled = false; // the in ring waits for room in the out ring (an RDMA read answer)
    P2p *p2p = nullptr;
    VIP_VI_ATTRIBUTES peer_attrs{};
};

inline Endpoint *endpoint(Vi *vi) {
    return static_cast<Endpoint *>(vi->prov);
}

// ------------------------------------------------------------- functions

// shm_nic.cc
VIP_RETURN nic_open(Nic *nic, const char *device);
void nic_close(Nic *nic);
VIP_RETURN ns_by_name(Nic *nic, const char *name, VIP_NET_ADDRESS *out, VIP_ULONG index);
VIP_RETURN ns_by_addr(Nic *nic, const VIP_NET_ADDRESS *addr, char *name, VIP_ULONG *len);
VIP_RETURN autodiscovery(Nic *nic, VIP_AUTODISCOVERY_LIST *list);
bool is_this_host(const Nic *nic, const VIP_NET_ADDRESS *addr);
int listener_for(Nic *nic, const std::string &name, VIP_RETURN *rc);
std::string socket_name(const char *kind, const VIP_NET_ADDRESS *addr);

// shm_conn.cc: handshake
VIP_RETURN connect_wait(Nic *nic, const VIP_NET_ADDRESS *local, uint64_t deadline, ConnReq *req,
                        VIP_NET_ADDRESS *remote, VIP_VI_ATTRIBUTES *remote_attrs);
VIP_RETURN connect_wait_fd(Nic *nic, const VIP_NET_ADDRESS *local, int *fd);
VIP_RETURN connect_accept(ConnReq *req, Vi *vi);
VIP_RETURN connect_reject(ConnReq *req);
void conn_free(ConnReq *req);
VIP_RETURN connect_request(Vi *vi, const VIP_NET_ADDRESS *local, const VIP_NET_ADDRESS *remote,
                           uint64_t deadline, VIP_VI_ATTRIBUTES *remote_attrs);
VIP_RETURN peer_request(Vi *vi, const VIP_NET_ADDRESS *local, const VIP_NET_ADDRESS *remote,
                        uint64_t deadline);
VIP_RETURN peer_progress(Vi *vi, VIP_VI_ATTRIBUTES *remote_attrs, pollfd *fds, int *nfds,
                         uint64_t *deadline);
void p2p_free(Endpoint *ep);

// shm_endpoint.cc: life of the transport
VIP_RETURN vi_create(Vi *vi);
void vi_destroy(Vi *vi);
VIP_RETURN endpoints(Vi *vi, VIP_VI_ENDPOINTS *out);
void disconnect(Vi *vi);
void leave(Vi *vi);
void abandon(Vi *vi);
// Records the connection's descriptors and mapping as this process's copies
// (kept open and mapped in fork children if the VI is shareable).
void hold_endpoint(Vi *vi, Endpoint *ep);
// Ends a connection (lock held): hang-up, copies closed, state reset.
void transport_down(Vi *vi, Endpoint *ep);
bool cross_memory_attach_works(pid_t pid, uint64_t probe_addr);
uint64_t probe_address();

// shm_send.cc
VIP_RETURN post_send(Vi *vi, WqEntry *e, const PostedDesc &d);
uint32_t inline_max(Vi *vi);
VIP_RETURN post_inline(Vi *vi, const Segment *segs, uint32_t nseg, uint64_t len);
void post_recv(Vi *vi, WqEntry *e);
void push_sends(Vi *vi, Endpoint *ep);
void complete_acked(Vi *vi, Endpoint *ep);
// Reserves room for a record of `bytes` (header included) in the out ring, using at
// most `limit` bytes of it (0: all); returns its position or UINT64_MAX when the ring
// is that full.
uint64_t ring_reserve(Endpoint *ep, uint64_t bytes, uint64_t limit = 0);
RecHdr *ring_record(Endpoint *ep, uint64_t pos);
void ring_publish(Endpoint *ep, uint64_t pos, uint64_t bytes, uint16_t type, uint16_t flags,
                  uint32_t len, uint32_t imm);
uint32_t max_chunk(const Endpoint *ep);

void fail_entry_at(Vi *vi, uint64_t pos);
// An RDMA read answer: `b` is the receiver's copy of its body, `chunk` its data in the ring.
bool read_response(Vi *vi, Endpoint *ep, const ReadRespBody &b, const uint8_t *chunk, uint32_t len,
                   bool last);

// shm_recv.cc
void progress(Vi *vi);
// Could progress find something?  Called with vi->lock held, without side effects.
bool pending(Vi *vi);
// Ends the connection after an error found on this side: tells the peer which
// error to raise there (remote), fails this VI with local.
void break_connection(Vi *vi, Endpoint *ep, VIP_ERROR_CODE local, VIP_ERROR_CODE remote,
                      uint64_t at, VIP_DESCRIPTOR *desc = nullptr);

// shm_rdma.cc
// Initiator side checks against the peer's region table and VI.
bool remote_allows(Endpoint *ep, VIP_MEM_HANDLE h, uint64_t addr, uint64_t len, bool write);
// Cross-memory copies; return bytes moved.
uint64_t cma_read(pid_t pid, const Segment *local, uint32_t nlocal, const Segment *remote,
                  uint32_t nremote, uint64_t len);
uint64_t cma_write(pid_t pid, const Segment *local, uint32_t nlocal, uint64_t raddr, uint64_t len);

// shm_doorbell.cc
void arm(Vi *vi, unsigned what);
void disarm(Vi *vi);
bool armed(Vi *vi);
// Rings the peer's doorbell if it sleeps waiting for an event of kind `what`
// (kWakeRecv after publishing records, kWakeSend after consuming).
void ring_peer(Vi *vi, Endpoint *ep, unsigned what);
// Rings the peer if records were published since ep->produced was `before`: only records
// wake a receiver (a post done by cross-memory copy, or still waiting for room, gives it
// nothing to take).
inline void ring_for_records(Vi *vi, Endpoint *ep, uint64_t before) {
    if (ep->up && ep->produced != before) ring_peer(vi, ep, kWakeRecv);
}
int wait_fds(Vi *vi, pollfd *fds, int max);
void check_peer(Vi *vi);
int exchange_cpu(Vi *vi, int my_cpu);
bool peer_busy(Vi *vi);
// Whether the peer hung up (cheap: checked every LIVENESS_MS unless forced).
bool peer_hung_up(Vi *vi, Endpoint *ep, bool force);

} // namespace vipl::shm
