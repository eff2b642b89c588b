// Helpers of the multiprocess tests: memory shared by the test's own
// processes (outside VIPL), a peer server process with a private VI that
// checks every message it gets, endpoints with shareable VIs, the traffic
// several holders of one shareable VI generate together, and views of
// /proc/<pid>.
//
// Children report through shared memory (Board) and exit codes, which the
// test's root process turns into assertions with the children's words.
#pragma once

#include "procs.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <sys/types.h>
#include <vector>

namespace vt {

// ------------------------------------------------------------ shared memory

// MAP_SHARED anonymous memory, zeroed, unmapped when the owner goes out of scope.
struct SharedBlock {
    void *p = nullptr;
    size_t size = 0;
    explicit SharedBlock(size_t bytes);
    ~SharedBlock();
    SharedBlock(const SharedBlock &) = delete;
    SharedBlock &operator=(const SharedBlock &) = delete;
};

// One T in memory shared with every child forked afterwards.
template <class T>
struct Shared {
    SharedBlock block{sizeof(T)};
    T *p = new (block.p) T();
    T *operator->() { return p; }
    T &operator*() { return *p; }
};

// First failure of each process of a test, readable by the root.
struct Board {
    static constexpr int kSlots = 160;
    std::atomic<int> used[kSlots];
    char text[kSlots][240];
    // Records "who: message" once per slot (first failure wins).
    void fail(int slot, const std::string &msg);
    std::string all() const;
    bool any() const;
};

// ------------------------------------------------------------ messages

constexpr uint32_t kMsgBytes = 64;
constexpr uint32_t kMsgMagic = 0x7370726f; // "orps"
constexpr int kMaxSenders = 1100;

// Writes message (sender, seq) into buf: header then a pattern derived from both.
void make_msg(uint8_t *buf, uint32_t sender, uint32_t seq);
// Checks a message; false with a description in *why when it is malformed.
bool parse_msg(const uint8_t *buf, uint32_t len, uint32_t *sender, uint32_t *seq, std::string *why);

// ------------------------------------------------------------ the peer

// What a server process tells the test, in shared memory.
struct ServerStats {
    std::atomic<int> listening{0};
    std::atomic<int> connected{0}; // connections accepted so far
    std::atomic<int> ended{0};     // connections that ended (peer gone)
    static constexpr int kMaxConns = 1024;
    std::atomic<int> end_code[kMaxConns]; // VIP_ERROR_CODE reported for connection i (-1: none yet)
    std::atomic<double> ended_ms[kMaxConns];
    std::atomic<uint64_t> received{0};
    std::atomic<uint64_t> echoed{0};
    std::atomic<uint64_t> bad{0}; // malformed, duplicated, reordered or lost messages
    std::atomic<uint32_t> next_seq[kMaxSenders];
    std::atomic<int> stop{0};
    std::atomic<int> max_conns{1};
    // RDMA write requests: the test sets them, the server performs them on
    // its current connection and sets rdma_done to the VIP_RETURN + 1000 of
    // the completion (1000 = VIP_SUCCESS).
    std::atomic<int> rdma_req{0};
    std::atomic<int> rdma_done{0};
    std::atomic<uint64_t> rdma_addr{0};
    std::atomic<uint32_t> rdma_mh{0};
    std::atomic<uint32_t> rdma_len{0};
    std::atomic<uint32_t> rdma_imm{0};
    std::atomic<int> first_error_set{0};
    char first_error[256];
    ServerStats();
    void error(const std::string &what);
};

struct ServerOpts {
    bool echo = true; // send every message back, unchanged
    VIP_RELIABILITY_LEVEL level = VIP_SERVICE_RELIABLE_DELIVERY;
    VIP_ULONG mtu = 4096;
    int recvs = 256;
    bool client = false;         // requests the connection to disc instead of accepting it
    double lifetime_ms = 100000; // gives up after this long whatever happens
};

// Body of a server process: accepts connections on disc one after the other
// (up to max_conns, at most kMaxConns), checks that each sender's sequence numbers arrive in
// order without gaps or duplicates, echoes, and records how each connection
// ended.  Returns an exit code.
int run_server(ServerStats *s, const std::string &disc, const ServerOpts &o = ServerOpts());

// Forks a server process (killed when its parent dies).
pid_t spawn_server(ServerStats *s, const std::string &disc, const ServerOpts &o = ServerOpts());

// Waits until pred() holds, up to timeout_ms; returns pred().
bool wait_for(const std::function<bool()> &pred, int timeout_ms);

// ------------------------------------------------------------ shareable VIs

// Layout of a ShVi's shareable region.
constexpr int kRecvs = 512; // receive descriptors posted before fork
constexpr int kProcs = 8;   // processes generating traffic
constexpr int kSlots = 64;  // send descriptors of each process
constexpr size_t kRecvDescAt = 0;
constexpr size_t kSendDescAt = kRecvDescAt + kRecvs * 64;
constexpr size_t kRecvBufAt = kSendDescAt + kProcs * kSlots * 64;
constexpr size_t kSendBufAt = kRecvBufAt + kRecvs * 64;
constexpr size_t kFreeAt = kSendBufAt + kProcs * kSlots * 64; // free for the test
constexpr size_t kRegionBytes = 1 << 20;

// A NIC, a shareable region, a shareable VI (and optionally one shareable CQ
// for both of its queues), built with plain VIPL calls: usable in children.
struct ShVi : vt::FirstError {
    VIP_NIC_HANDLE nic = nullptr;
    VIP_PROTECTION_HANDLE ptag = nullptr;
    VIP_VI_HANDLE vi = nullptr;
    VIP_CQ_HANDLE cq = nullptr;
    uint8_t *mem = nullptr;
    VIP_MEM_HANDLE mh = 0;

    bool open(bool with_cq = false, VIP_RELIABILITY_LEVEL level = VIP_SERVICE_RELIABLE_DELIVERY,
              VIP_ULONG mtu = 4096);
    // Posts the kRecvs receive descriptors (each with a 64-byte buffer).
    bool post_recvs();
    // Name service through ns_nic if given (a child cannot use the parent's NIC).
    bool connect(const std::string &disc, int timeout_ms = 10000, VIP_NIC_HANDLE ns_nic = nullptr);
    // Waits for the client of disc and accepts it with this VI.
    bool accept(const std::string &disc, int timeout_ms = 10000);
    // With addresses made beforehand (vt::address(nic, disc + "c"), vt::address(nic, disc)).
    bool connect_to(std::vector<uint8_t> local, std::vector<uint8_t> remote,
                    int timeout_ms = 10000);
    // Last holder: disconnects, takes what is left on both queues, destroys the VI.
    bool close_last();
    // Closes the NIC (what is left on it goes too) and unmaps the region.
    bool close_nic();
    VIP_DESCRIPTOR *recv_desc(int i) {
        return reinterpret_cast<VIP_DESCRIPTOR *>(mem + kRecvDescAt) + i;
    }
    VIP_DESCRIPTOR *send_desc(int proc, int slot) {
        return reinterpret_cast<VIP_DESCRIPTOR *>(mem + kSendDescAt) + proc * kSlots + slot;
    }
    uint8_t *recv_buf(int i) { return mem + kRecvBufAt + i * 64; }
    uint8_t *send_buf(int proc, int slot) { return mem + kSendBufAt + (proc * kSlots + slot) * 64; }
    int recv_index(const VIP_DESCRIPTOR *d) const {
        return static_cast<int>(d - reinterpret_cast<const VIP_DESCRIPTOR *>(mem + kRecvDescAt));
    }
    int send_index(const VIP_DESCRIPTOR *d) const {
        return static_cast<int>(d - reinterpret_cast<const VIP_DESCRIPTOR *>(mem + kSendDescAt));
    }
};

// Accounting of traffic generated by several holders of one shareable VI, in
// memory they all share.  Every message (sender, seq) is sent once, echoed
// by the server once; each completion must be taken by exactly one process.
struct Traffic {
    static constexpr int kMaxPer = 2000;
    int nproc = 0, per_proc = 0, window = 200;
    std::atomic<int64_t> sent{0};
    std::atomic<int64_t> echoes{0};
    std::atomic<int64_t> sends_done{0};
    std::atomic<uint32_t> send_taken[kProcs * kMaxPer];
    std::atomic<uint32_t> recv_taken[kProcs * kMaxPer];
    std::atomic<uint32_t> by_proc_send[kProcs];
    std::atomic<uint32_t> by_proc_recv[kProcs];
    std::atomic<uint8_t> busy[kProcs][kSlots];
    std::atomic<uint32_t> cq_entries[kProcs];
    Traffic();
};

// The work of holder `me`: posts per_proc messages (at most `window`
// unanswered in all), takes completions (from the VI's queues, or from its
// CQ when use_cq) and reposts receives, until every process's messages are
// echoed and every send completed.  Returns "" or what went wrong.
std::string traffic(ShVi &v, Traffic *t, int me, bool use_cq, double timeout_ms);

// One round trip by a single process: sends (sender, seq) and waits for its
// echo, by polling the Done calls, or sleeping in the Wait calls if `sleep`.
std::string round_trip(ShVi &v, int proc, uint32_t sender, uint32_t seq, int timeout_ms = 3000,
                       bool sleep = false);

// Options of a private endpoint (vt::Ep) of these tests: the device under
// test (vt::device()), a 4 KiB MTU.
vt::Opts ep_opts();

// A private VI (vt::Ep) with receives posted, talking to a server process.
struct PrivEp : vt::Ep {
    static constexpr int kRecvDescs = 16;
    bool setup(const std::string &disc, int timeout_ms = 10000);
    // Sends (sender, seq) and waits for its echo; "" or what went wrong.
    std::string round_trip(uint32_t sender, uint32_t seq, int timeout_ms = 3000);
};

// Has the server RDMA-write len bytes (a pattern seeded with imm) with
// immediate data imm at v.mem + kFreeAt, and checks, by polling VipRecvDone
// in this process, that the data and the immediate completion arrived.
std::string remote_write(ShVi &v, ServerStats *srv, uint32_t len, uint32_t imm,
                         int timeout_ms = 3000);

// ------------------------------------------------------------ /proc views

struct FdInfo {
    std::string link;
    bool cloexec = false;
};
// Open descriptors of a process (pid 0: this one) with what they point at.
std::map<int, FdInfo> fds_of(pid_t pid = 0);
// Lines of /proc/<pid>/maps.
std::vector<std::string> maps_of(pid_t pid = 0);
// Mappings that are shared (perms "..s."), as "<dev> <inode> <path>" keys.
std::set<std::string> shared_mapping_keys(const std::vector<std::string> &maps);
std::string describe(const std::map<int, FdInfo> &fds);

// Kills and reaps a child (no-op for pid <= 0).
void kill_wait(pid_t pid);

} // namespace vt
