// Test fixtures shared by every test: NICs, registered memory, addresses,
// connected VI pairs (in one process, with a thread) and child processes.
#pragma once

#include <vipl.h>
#include <vipl_ext.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace vt {

// Devices the conformance suite runs on: VIPL_TEST_DEVICES (comma list), default "shm0".
const std::vector<std::string> &devices();

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

VIP_VI_ATTRIBUTES vi_attrs(const Nic &n, VIP_RELIABILITY_LEVEL level = VIP_SERVICE_RELIABLE_DELIVERY,
                           VIP_ULONG mtu = 0, bool rdma_write = false, bool rdma_read = false);

// Fills a send/receive descriptor with one data segment (or none when len == 0).
void set_desc(VIP_DESCRIPTOR *d, void *buf, uint32_t len, VIP_MEM_HANDLE mh, uint16_t control = 0,
              uint32_t imm = 0);
// Fills an RDMA descriptor: remote address segment, then one local segment.
void set_rdma(VIP_DESCRIPTOR *d, uint16_t op, void *local, uint32_t len, VIP_MEM_HANDLE lmh,
              uint64_t raddr, VIP_MEM_HANDLE rmh, uint16_t extra_control = 0, uint32_t imm = 0);

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
// Disconnects (if connected), drains both queues and destroys the VI.
void destroy_vi(VIP_VI_HANDLE vi);

// Runs fn in a forked child; returns its exit status as from waitpid (fn's
// return value is the exit code; a failed REQUIRE in the child exits with 99).
int run_child(const std::function<int()> &fn, int timeout_s = 60);
// Forks a child running fn and returns its pid without waiting.
int spawn_child(const std::function<int()> &fn);
// Waits for a child with a bound; returns its status or -1 after killing it.
int wait_child(int pid, int timeout_s = 60);

// Counts threads of this process (/proc/self/task).
int thread_count();

// Simple pattern helpers for integrity checks.
void fill_pattern(uint8_t *p, size_t n, uint32_t seed);
bool check_pattern(const uint8_t *p, size_t n, uint32_t seed);
uint64_t checksum(const uint8_t *p, size_t n);

} // namespace vt
