// Test fixtures shared by every test: NICs, registered memory, addresses,
// connected VI pairs (in one process, with a thread) and child processes.
#pragma once

#include <vipl.h>
#include <vipl_ext.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace vt {

// Bound, in milliseconds, of every wait for something that should happen at
// once (a completion, a connection, an error report): generous, yet short
// enough that a missed wake-up does not stall the whole suite.
constexpr int kWaitMs = 2000;

// Devices the conformance suite runs on: VIPL_TEST_DEVICES (comma list), default "shm0".
const std::vector<std::string> &devices();

// The one device of tests that run on a single provider: the first of devices().
const std::string &device();

// Catch2 helper: GENERATE(from_range(vt::devices()))
#define VT_DEVICE() GENERATE(from_range(::vt::devices()))

// A discriminator unique to this process and call ("t<pid>-<n>-<tag>").
std::string unique_disc(const char *tag = "");

struct Nic {
    VIP_NIC_HANDLE nic = nullptr;
    VIP_PROTECTION_HANDLE ptag = nullptr;
    VIP_NIC_ATTRIBUTES attrs{};
    explicit Nic(const std::string &device);
    ~Nic();
    // Closes the NIC now (destroying what is left on it), e.g. before the
    // memory of descriptors still queued on its VIs goes away.
    void close();
    Nic(const Nic &) = delete;
    Nic &operator=(const Nic &) = delete;
};

// Page-aligned memory, registered with the NIC's ptag.
struct Memory {
    VIP_NIC_HANDLE nic;
    uint8_t *base = nullptr;
    size_t size = 0;
    VIP_MEM_HANDLE mh = 0;
    Memory(const Nic &n, size_t bytes, bool rdma_write = false, bool rdma_read = false,
           VIP_PROTECTION_HANDLE ptag = nullptr);
    ~Memory();
    Memory(const Memory &) = delete;
    Memory &operator=(const Memory &) = delete;
    // The i-th 64-byte-aligned descriptor slot at the start of the region.
    VIP_DESCRIPTOR *desc(size_t i) { return reinterpret_cast<VIP_DESCRIPTOR *>(base) + i; }
};

// A VIP_NET_ADDRESS for host + discriminator, in its own storage.
struct Address {
    std::vector<uint8_t> bytes;
    Address(VIP_NIC_HANDLE nic, const std::string &disc, const char *host = "localhost");
    VIP_NET_ADDRESS *get() { return reinterpret_cast<VIP_NET_ADDRESS *>(bytes.data()); }
};

VIP_VI_ATTRIBUTES vi_attrs(const Nic &n,
                           VIP_RELIABILITY_LEVEL level = VIP_SERVICE_RELIABLE_DELIVERY,
                           VIP_ULONG mtu = 0, bool rdma_write = false, bool rdma_read = false);

// Fills a send/receive descriptor with one data segment (or none when len == 0).
void set_desc(VIP_DESCRIPTOR *d, void *buf, uint32_t len, VIP_MEM_HANDLE mh, uint16_t control = 0,
              uint32_t imm = 0);
// Fills an RDMA descriptor: remote address segment, then one local segment.
void set_rdma(VIP_DESCRIPTOR *d, uint16_t op, void *local, uint32_t len, VIP_MEM_HANDLE lmh,
              uint64_t raddr, VIP_MEM_HANDLE rmh, uint16_t extra_control = 0, uint32_t imm = 0);

// One local buffer of a send, receive or RDMA descriptor.
struct Seg {
    void *addr;
    uint32_t len;
    VIP_MEM_HANDLE mh;
};
// Fills a send/receive descriptor with any number of data segments (those
// beyond DS[1] follow it in memory: leave room for them); Length is their sum.
void set_sg(VIP_DESCRIPTOR *d, const std::vector<Seg> &segs, uint16_t control = 0,
            uint32_t imm = 0);
// The same for an RDMA descriptor: the remote address segment, then the local ones.
void set_rdma_sg(VIP_DESCRIPTOR *d, uint16_t op, uint64_t raddr, VIP_MEM_HANDLE rmh,
                 const std::vector<Seg> &segs, uint16_t extra_control = 0, uint32_t imm = 0);

// Two VIs connected to each other in this process (server side accepted on a
// thread).  `before_connect` may post receives on both.
struct Pair {
    VIP_VI_HANDLE a = nullptr; // accepted (server) side
    VIP_VI_HANDLE b = nullptr; // requesting (client) side
};
Pair connect_pair(const Nic &na, const Nic &nb, const VIP_VI_ATTRIBUTES &attrs_a,
                  const VIP_VI_ATTRIBUTES &attrs_b, VIP_CQ_HANDLE scq_a = nullptr,
                  VIP_CQ_HANDLE rcq_a = nullptr, VIP_CQ_HANDLE scq_b = nullptr,
                  VIP_CQ_HANDLE rcq_b = nullptr,
                  const std::function<void(VIP_VI_HANDLE a, VIP_VI_HANDLE b)> &before_connect = {});
// VipConnectRequest, tried again while nobody waits on the discriminator yet
// (VIP_NO_MATCH), for up to timeout_ms in all.
VIP_RETURN connect_request(VIP_VI_HANDLE vi, VIP_NET_ADDRESS *local, VIP_NET_ADDRESS *remote,
                           int timeout_ms, VIP_VI_ATTRIBUTES *remote_attrs = nullptr);
// Room for any address a NIC returns (RemoteAddr of VipConnectWait...).
struct AddressBuffer {
    std::vector<uint8_t> bytes = std::vector<uint8_t>(sizeof(VIP_NET_ADDRESS) + 1024);
    VIP_NET_ADDRESS *get() { return reinterpret_cast<VIP_NET_ADDRESS *>(bytes.data()); }
    std::string discriminator() {
        const VIP_NET_ADDRESS *a = get();
        const char *d = reinterpret_cast<const char *>(a->HostAddress + a->HostAddressLen);
        return std::string(d, a->DiscriminatorLen);
    }
};
// Whether fd becomes readable (POLLIN) within timeout_ms (0: now; a signal does not
// end the wait early).
bool readable(int fd, int timeout_ms);

// Disconnects (if connected), drains both queues and destroys the VI.
void destroy_vi(VIP_VI_HANDLE vi);

// The state of a VI (fails the test if the handle is refused).
VIP_VI_STATE vi_state(VIP_VI_HANDLE vi);

// A descriptor taken off a queue while driving a VI.
struct Taken {
    VIP_DESCRIPTOR *desc;
    VIP_RETURN rc;
    bool recv;
};
// Calls SendDone/RecvDone on vi (which is what makes a VI progress) until
// pred() holds or timeout_ms pass; descriptors taken are appended to taken.
bool drive_until(VIP_VI_HANDLE vi, const std::function<bool()> &pred, int timeout_ms,
                 std::vector<Taken> *taken = nullptr);
// Drives vi until it reaches state (see drive_until).
bool drive_to_state(VIP_VI_HANDLE vi, VIP_VI_STATE state, int timeout_ms,
                    std::vector<Taken> *taken = nullptr);

// Keeps a VI progressing from a background thread, as a program's event loop
// would: calls VipSendDone on it (tests that use it post no sends there;
// anything it takes anyway is counted in `stray`).
class Pump {
public:
    explicit Pump(VIP_VI_HANDLE vi);
    ~Pump();
    Pump(const Pump &) = delete;
    Pump &operator=(const Pump &) = delete;
    std::atomic<int> stray{0};

private:
    VIP_VI_HANDLE vi_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

// Records the asynchronous errors a NIC's error callback receives.  Declare
// it before the Nic so that it outlives the NIC's notifications.
class ErrorLog {
public:
    void install(VIP_NIC_HANDLE nic);
    // Waits for an error with this code (on this VI unless vi is NULL); true
    // and *out filled when one was recorded.
    bool wait_for(VIP_ERROR_CODE code, VIP_VI_HANDLE vi, int timeout_ms,
                  VIP_ERROR_DESCRIPTOR *out = nullptr);
    // Waits for any error on this VI.
    bool wait_any(VIP_VI_HANDLE vi, int timeout_ms, VIP_ERROR_DESCRIPTOR *out = nullptr);
    std::vector<VIP_ERROR_DESCRIPTOR> all();
    static void handler(VIP_PVOID context, VIP_ERROR_DESCRIPTOR *err);

private:
    std::mutex m_;
    std::condition_variable cv_;
    std::vector<VIP_ERROR_DESCRIPTOR> errors_;
};

// A pipe to synchronise with a child process (both ends stay open on both sides).
struct Pipe {
    int fd[2] = {-1, -1};
    Pipe();
    ~Pipe();
    Pipe(const Pipe &) = delete;
    Pipe &operator=(const Pipe &) = delete;
    void put(char c);
    // Reads one byte within timeout_ms; false on timeout or end of file.
    bool get(char *c, int timeout_ms);
};

// Runs fn in a forked child; returns its exit status as from waitpid (fn's
// return value is the exit code; a failed REQUIRE in the child exits with 99).
int run_child(const std::function<int()> &fn, int timeout_s = 60);
// Forks a child running fn and returns its pid without waiting.
int spawn_child(const std::function<int()> &fn);
// Waits for a child with a bound; returns its status or -1 after killing it.
int wait_child(int pid, int timeout_s = 60);

// Runs the hidden test case `test_name` (tagged "[.]") in a new copy of this
// executable (fork, then exec) with `env` ("KEY=VALUE") added to its
// environment.  A forked child shares the configuration the library already
// read in this process; a new program reads VIPL_* afresh.  Returns the pid.
int spawn_fresh(const std::string &test_name, const std::vector<std::string> &env = {});
// The same, waiting up to timeout_s; returns the status as from waitpid (exit
// code 0: the test case ran and no assertion failed) or -1 after killing it.
int run_fresh(const std::string &test_name, const std::vector<std::string> &env = {},
              int timeout_s = 60);
// The value of a configuration key in effect in this process (VipConfigInfo), "" if unknown.
std::string config_value(const char *key);
// "exit 0", "signal 9", "timeout": a waitpid status for messages.
std::string status_text(int status);

// Counts threads of this process (/proc/self/task).
int thread_count();

// Values that are not handles of any object: random 64-bit numbers (fixed
// seed, so failures reproduce), all-ones, small integers, the address of a variable.
std::vector<VIP_PVOID> garbage_handles(size_t random_count = 200);

// Simple pattern helpers for integrity checks.
void fill_pattern(uint8_t *p, size_t n, uint32_t seed);
bool check_pattern(const uint8_t *p, size_t n, uint32_t seed);
uint64_t checksum(const uint8_t *p, size_t n);

} // namespace vt
