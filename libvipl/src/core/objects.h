// The generic VIPL objects: NIC, protection tag, region table, VI with its
// two work queues, completion queue, pending connection request.
#pragma once

#include "core/handles.h"
#include "core/mutex.h"

#include <vipl.h>
#include <vipl_ext.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace vipl {

struct ProviderOps;
struct Nic;
struct Vi;
struct Cq;

// ------------------------------------------------------------- regions

enum RegionFlags : uint32_t {
    kRegionLive = 1,
    kRegionRdmaWrite = 2,
    kRegionRdmaRead = 4,
    kRegionShareable = 8, // in memory shared with fork children
};

// One registered region.  The table lives in a memfd so a provider can map
// it read-only into peers that check RDMA against it (same host).
struct RegionEntry {
    std::atomic<uint32_t> seq; // seqlock, odd while the entry changes
    uint32_t gen;              // generation in the handle, 1..4095
    uint64_t base;
    uint64_t length;
    uint32_t ptag; // ptag id
    std::atomic<uint32_t> flags;
};
static_assert(sizeof(RegionEntry) == 32);

constexpr uint32_t kRegionIndexBits = 20;
constexpr uint32_t kRegionIndexMask = (1u << kRegionIndexBits) - 1;
inline uint32_t region_index(VIP_MEM_HANDLE h) {
    return h & kRegionIndexMask;
}
inline uint32_t region_gen(VIP_MEM_HANDLE h) {
    return h >> kRegionIndexBits;
}

class RegionTable {
public:
    bool init(uint32_t max_regions);
    void destroy();

    // Entry named by handle if live (no lock; entries never move).
    const RegionEntry *find(VIP_MEM_HANDLE h) const {
        uint32_t i = region_index(h);
        if (i >= max_) return nullptr;
        const RegionEntry *e = &entries_[i];
        if (!(e->flags.load(std::memory_order_acquire) & kRegionLive) || e->gen != region_gen(h))
            return nullptr;
        return e;
    }
    // Does the live region h, of ptag, with all of flags, contain [addr, addr+len)?
    bool covers(VIP_MEM_HANDLE h, uint32_t ptag, uint64_t addr, uint64_t len,
                uint32_t flags = 0) const {
        const RegionEntry *e = find(h);
        return e && e->ptag == ptag &&
               (e->flags.load(std::memory_order_relaxed) & flags) == flags && addr >= e->base &&
               len <= e->length && addr - e->base <= e->length - len;
    }

    VIP_RETURN add(uint64_t base, uint64_t len, uint32_t ptag, uint32_t flags, VIP_MEM_HANDLE *out);
    void remove(VIP_MEM_HANDLE h);
    void set(VIP_MEM_HANDLE h, uint32_t ptag, uint32_t flags);
    void set_live(VIP_MEM_HANDLE h, bool live);
    // Keeps the table mapped in fork children (the NIC has shareable objects).
    void share_with_children();
    // In a fork child done with its parent's shareable objects: unmaps and
    // closes what it inherited of the table.
    void drop_inherited();

    int fd() const { return fd_; }
    size_t map_size() const { return static_cast<size_t>(max_) * sizeof(RegionEntry); }
    uint32_t max() const { return max_; }
    uint64_t bytes() const { return bytes_; }
    uint32_t count() const { return count_; }

private:
    RegionEntry *entries_ = nullptr;
    uint32_t max_ = 0;
    uint32_t next_ = 0;
    uint32_t count_ = 0;
    uint64_t bytes_ = 0;
    std::vector<uint32_t> free_;
    int fd_ = -1;
    bool shared_ = false;
};

// -------------------------------------------------------------- NIC

using ErrorHandler = void (*)(VIP_PVOID, VIP_ERROR_DESCRIPTOR *);

struct Nic : Object {
    Mutex lock;
    const ProviderOps *ops = nullptr;
    void *prov = nullptr; // provider state
    VIP_NIC_ATTRIBUTES attrs{};
    uint8_t address[32]{};
    RegionTable regions;
    uint32_t ptags = 0;
    std::vector<Vi *> vis; // under lock
    std::vector<Cq *> cqs; // under lock
    Mutex error_lock;      // guards the three below
    ErrorHandler error_handler = nullptr;
    VIP_PVOID error_context = nullptr;
    std::deque<VIP_ERROR_DESCRIPTOR> errors; // waiting for the notification thread
};

struct Ptag : Object {
    Nic *nic = nullptr;
    std::atomic<uint32_t> users{0}; // VIs and regions using it
    uint32_t id() const { return index + 1; }
};

// ----------------------------------------------------------- work queues

enum WqFlags : uint16_t {
    kWqDone = 1,      // completed (maybe not yet visible: an earlier entry is not done)
    kWqStarted = 2,   // handed to the transport
    kWqImm = 4,       // ImmediateData valid in the completion
    kWqProv1 = 0x100, // free for the provider
    kWqProv2 = 0x200,
    kWqProv3 = 0x400,
    kWqProv4 = 0x800,
};

struct WqEntry {
    VIP_DESCRIPTOR *desc;
    uint32_t status; // completion status (VIP_STATUS_*), set with kWqDone
    uint32_t length;
    uint32_t imm;
    uint16_t flags;
    uint16_t op;            // VIP_CONTROL_OP_*
    uint32_t regions[3];    // regions it uses (for deregistration), ~0u = none
    uint32_t more_segments; // segments beyond those recorded in regions[]
    uint64_t p0, p1, p2;    // provider's bookkeeping
    // Receives: the segments as checked at post (up to two), so delivery
    // neither parses the descriptor again nor follows later changes to it.
    uint32_t nseg; // kNotCached: more than two, parse at delivery
    uint64_t capacity;
    struct {
        uint64_t addr, len;
    } seg[2];
};
constexpr uint32_t kNotCached = ~0u;

// FIFO of descriptors.  [head, visible) completed and written back;
// [visible, tail) outstanding.  `cursor` is the provider's own position.
struct WorkQueue {
    WqEntry *ring = nullptr; // power-of-two capacity, grows up to the limit
    uint32_t cap = 0;
    bool shared = false; // storage in the shared arena (shareable VI)
    uint64_t head = 0, visible = 0, cursor = 0, tail = 0;
    Cq *cq = nullptr;
    bool cq_backlog = false; // a completion waits for room in the CQ
    void (*notify)(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *) = nullptr;
    VIP_PVOID notify_context = nullptr;

    uint64_t size() const { return tail - head; }
    WqEntry &at(uint64_t i) { return ring[i & (cap - 1)]; }
    bool grow(uint32_t limit);
    // Empties the queue and frees its storage.
    void reset();
};

// --------------------------------------------------------------- VI

struct Vi : Object {
    Mutex lock;
    // Region flags every descriptor and buffer of this VI needs (shareable VIs: shareable memory).
    uint32_t region_flags() const { return shareable ? uint32_t(kRegionShareable) : 0u; }
    Nic *nic = nullptr;
    std::atomic<int> state{VIP_STATE_IDLE};
    VIP_VI_ATTRIBUTES attrs{};
    uint32_t ptag_id = 0;
    WorkQueue sq, rq;
    void *prov = nullptr; // provider endpoint

    // Waiting.  efd is this VI's doorbell: peers and local threads write it.
    int efd = -1;
    // Threads asleep in a wait (from just before they look at the VI a last
    // time until they wake), which use its descriptors without the lock:
    // destroying it waits for them to leave.
    std::atomic<int> sleepers{0};
    std::atomic<bool> kicked{false};
    // An edge-triggered sleeper woke on the doorbell and left its count: a level poller's
    // next arming drains it (vi_rearm), else the fd would stay readable.
    std::atomic<bool> undrained{false};
    std::atomic<bool> fd_mode{false};
    // The program arms the wait fd itself before it sleeps (VipArmViWaitFd), not every
    // Done that finds nothing; fd_armed: the kinds of event (WakeFor) it armed for last,
    // which local completions wake the fd for too.
    std::atomic<bool> fd_explicit{false};
    std::atomic<uint8_t> fd_armed{0};
    // A Done runs progress (lock held, so one at a time in every holder): completions it
    // makes owe the wait fd a wake-up only if they are still there when it returns
    // (done_locked).  Both false outside that window.
    bool taking = false;
    bool wake_owed = false;
    uint64_t next_liveness = 0;
    // A holder died inside the library with the lock held (shareable VIs).
    bool poisoned = false;
    // What every holder of a shareable VI catches up with at its next call
    // (vi_catch_up): transports that went down (each holder closes its
    // copies of their descriptors), errors raised in another holder.
    uint32_t transport_epoch = 0;
    uint32_t error_seq = 0;
    VIP_ERROR_CODE error_code = VIP_ERROR_CONN_LOST;

    // Peer-to-peer connection in progress (provider state in prov).
    bool peer_pending = false;

    VIP_VI_COUNTERS counters{};

    // Back to a new VI's state, reused from the pool (lock held).  The lock
    // and the counter that threads holding a stale pointer still move
    // (sleepers: balanced, zero at rest) stay as they are.
    void recycle() {
        forget_identity();
        nic = nullptr;
        state.store(VIP_STATE_IDLE, std::memory_order_relaxed);
        attrs = {};
        ptag_id = 0;
        sq = WorkQueue{};
        rq = WorkQueue{};
        prov = nullptr;
        efd = -1;
        kicked.store(false, std::memory_order_relaxed);
        undrained.store(false, std::memory_order_relaxed);
        fd_mode.store(false, std::memory_order_relaxed);
        fd_explicit.store(false, std::memory_order_relaxed);
        fd_armed.store(0, std::memory_order_relaxed);
        taking = wake_owed = false;
        next_liveness = 0;
        poisoned = false;
        transport_epoch = 0;
        error_seq = 0;
        error_code = VIP_ERROR_CONN_LOST;
        peer_pending = false;
        counters = {};
    }
};

// ---------------------------------------------------------------- CQ

struct CqEntry {
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
};

struct Cq : Object {
    Mutex lock;
    Nic *nic = nullptr;
    CqEntry *ring = nullptr; // ring_cap entries, grown lazily up to capacity
    uint32_t ring_cap = 0;
    uint64_t head = 0, tail = 0;
    uint32_t capacity = 0;
    Vi **members = nullptr; // under lock; in the arena for a shareable CQ
    uint32_t nmembers = 0, members_cap = 0;
    bool backlog = false; // some member waits for room (its queue has cq_backlog)
    int efd = -1;         // kicked when an entry is added and somebody sleeps
    int epfd = -1;        // efd plus every member's fds: what waiters and users poll
    std::atomic<int> sleepers{0};
    std::atomic<bool> kicked{false};
    std::atomic<bool> fd_mode{false};
    void (*notify)(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN) = nullptr;
    VIP_PVOID notify_context = nullptr;
    // Threads inside a wait on this CQ, which use its descriptors without the
    // lock: destroying it waits for them to leave (InUse).
    std::atomic<int> users{0};

    // As Vi::recycle.
    void recycle() {
        forget_identity();
        nic = nullptr;
        ring = nullptr;
        ring_cap = 0;
        head = tail = 0;
        capacity = 0;
        members = nullptr;
        nmembers = members_cap = 0;
        backlog = false;
        efd = epfd = -1;
        kicked.store(false, std::memory_order_relaxed);
        fd_mode.store(false, std::memory_order_relaxed);
        notify = nullptr;
        notify_context = nullptr;
    }
};

// Counts the calling thread among an object's users for its lifetime.
class InUse {
public:
    explicit InUse(std::atomic<int> &users) : users_(users) {
        users_.fetch_add(1, std::memory_order_seq_cst);
    }
    ~InUse() { users_.fetch_sub(1, std::memory_order_release); }
    InUse(const InUse &) = delete;
    InUse &operator=(const InUse &) = delete;

private:
    std::atomic<int> &users_;
};

// ------------------------------------------------- connection requests

struct ConnReq : Object {
    Nic *nic = nullptr;
    void *prov = nullptr;
};

// ------------------------------------------------------------ tables

// What each process keeps of a VI for itself (a shareable VI's other holders
// have their own).
// Kinds of event a sleeper or a wait fd is armed for (ViOps::arm, VipArmViWaitFdEx).
enum WakeFor : unsigned { kWakeRecv = 1, kWakeSend = 2, kWakeAny = 3 };

struct ViLocal {
    int user_fd = -1;     // epoll fd handed out by VipGetViWaitFd
    int wait_ep = -1;     // edge-triggered set a lone sleeper waits in (made on first sleep)
    bool watched = false; // in the notification thread's set
    // This process's copies of the transport's descriptors and mapping, of
    // the transport of epoch `copies_epoch` (vi_hold_fd, vi_hold_map).
    static constexpr int kMaxCopies = 4;
    int copy_fd[kMaxCopies] = {-1, -1, -1, -1};
    void *copy_map = nullptr;
    size_t copy_map_size = 0;
    void *copy_aux = nullptr; // the provider's own per-process reference (ViOps::drop_aux)
    uint32_t copies_epoch = 0;
    uint32_t error_seq = 0;       // Vi::error_seq this process has reported
    uint64_t next_peer_look = 0;  // rearm_for_fd's next look at the peer (coarse_ns)
    uint8_t spin_misses = 0;      // waits in a row whose spinning found nothing (vi_wait)
    uint8_t handoff_misses = 0;   // waits in a row whose hand-offs found nothing
    bool planned_handoff = false; // the last plan handed the CPU instead of spinning
    bool planned_busy = false;    // the last plan spun for a peer at work on the VI
    uint8_t busy_misses = 0;      // waits in a row for a peer at work whose spinning missed
    bool planned_probe = false;   // the last plan was a probe (spinning had stopped)
    uint8_t probe_misses = 0;     // probes in a row that found nothing
};
constexpr unsigned kSpinMissesMax = 10;
constexpr unsigned kHandoffMissesMax = 4;
constexpr unsigned kBusyPeerFactor = 4; // budget of a spin whose peer is at work
constexpr unsigned kBusyMissesMax = 8;  // then a peer at work is spun for as any other
constexpr unsigned kProbeEvery = 32;    // waits per probe once spinning stopped, on average
constexpr unsigned kProbeMissesMax = 5; // each probe that misses halves the rate: 1 in 1024

using NicTable = HandleTable<Nic, HandleTag::nic>;
using PtagTable = HandleTable<Ptag, HandleTag::ptag>;
using ViTable = HandleTable<Vi, HandleTag::vi, ViLocal>;
using CqTable = HandleTable<Cq, HandleTag::cq>;
using ConnTable = HandleTable<ConnReq, HandleTag::conn>;

// One table of each kind per process, made at first use (from a static
// constructor too) and never destroyed.  The hot path is one load; the
// pointer starts null before any constructor runs.  Tables are born under
// g_table_birth, which the fork handlers hold: no child inherits one half
// made, and a process that never made one (a server that forks per
// connection and leaves VIPL to its children) locks and unlocks nothing of it
// across fork, which would have cost the parent and each child a copied page.
inline std::mutex g_table_birth;

template <class T>
class TheTable {
public:
    __attribute__((always_inline)) static T &get() {
        T *t = p_.load(std::memory_order_acquire);
        return t ? *t : make();
    }
    // The table if this process made it, else nullptr (for the fork handlers).
    static T *made() { return p_.load(std::memory_order_acquire); }

private:
    __attribute__((noinline)) static T &make() {
        std::lock_guard<std::mutex> g(g_table_birth);
        T *t = p_.load(std::memory_order_relaxed);
        if (!t) {
            t = new T;
            p_.store(t, std::memory_order_release);
        }
        return *t;
    }
    static inline std::atomic<T *> p_{nullptr};
};
__attribute__((always_inline)) inline NicTable &nics() {
    return TheTable<NicTable>::get();
}
__attribute__((always_inline)) inline PtagTable &ptags() {
    return TheTable<PtagTable>::get();
}
__attribute__((always_inline)) inline ViTable &vis() {
    return TheTable<ViTable>::get();
}
__attribute__((always_inline)) inline CqTable &cqs() {
    return TheTable<CqTable>::get();
}
__attribute__((always_inline)) inline ConnTable &conns() {
    return TheTable<ConnTable>::get();
}

// Calls f with each table this process has made.
template <class F>
void for_each_made_table(F &&f) {
    if (NicTable *t = TheTable<NicTable>::made()) f(*t);
    if (PtagTable *t = TheTable<PtagTable>::made()) f(*t);
    if (ViTable *t = TheTable<ViTable>::made()) f(*t);
    if (CqTable *t = TheTable<CqTable>::made()) f(*t);
    if (ConnTable *t = TheTable<ConnTable>::made()) f(*t);
}

} // namespace vipl
