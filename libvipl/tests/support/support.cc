#include "support.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace vt {

const std::vector<std::string> &devices() {
    static std::vector<std::string> list = [] {
        std::vector<std::string> out;
        const char *env = getenv("VIPL_TEST_DEVICES");
        std::string s = env && *env ? env : "shm0";
        size_t p = 0;
        while (p <= s.size()) {
            size_t q = s.find(',', p);
            if (q == std::string::npos) q = s.size();
            if (q > p) out.push_back(s.substr(p, q - p));
            p = q + 1;
        }
        return out;
    }();
    return list;
}

std::string unique_disc(const char *tag) {
    static std::atomic<int> n{0};
    return "t" + std::to_string(getpid()) + "-" + std::to_string(n++) + tag;
}

Nic::Nic(const std::string &device) {
    REQUIRE(VipOpenNic(device.c_str(), &nic) == VIP_SUCCESS);
    REQUIRE(VipQueryNic(nic, &attrs) == VIP_SUCCESS);
    REQUIRE(VipCreatePtag(nic, &ptag) == VIP_SUCCESS);
}

Nic::~Nic() {
    if (nic) VipCloseNic(nic);
}

Memory::Memory(const Nic &n, size_t bytes, bool rdma_write, bool rdma_read, VIP_PROTECTION_HANDLE ptag)
    : nic(n.nic), size(bytes) {
    void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    base = static_cast<uint8_t *>(p);
    VIP_MEM_ATTRIBUTES ma{ptag ? ptag : n.ptag, rdma_write ? VIP_TRUE : VIP_FALSE,
                          rdma_read ? VIP_TRUE : VIP_FALSE};
    REQUIRE(VipRegisterMem(nic, base, size, &ma, &mh) == VIP_SUCCESS);
}

Memory::~Memory() {
    // The NIC may already be closed by the test: deregistration then fails harmlessly.
    VipDeregisterMem(nic, base, mh);
    munmap(base, size);
}

Address::Address(VIP_NIC_HANDLE nic, const std::string &disc, const char *host)
    : bytes(sizeof(VIP_NET_ADDRESS) + 64 + disc.size()) {
    VIP_NET_ADDRESS *a = get();
    REQUIRE(VipNSGetHostByName(nic, const_cast<char *>(host), a, 0) == VIP_SUCCESS);
    a->DiscriminatorLen = static_cast<VIP_UINT16>(disc.size());
    memcpy(a->HostAddress + a->HostAddressLen, disc.data(), disc.size());
}

VIP_VI_ATTRIBUTES vi_attrs(const Nic &n, VIP_RELIABILITY_LEVEL level, VIP_ULONG mtu, bool rdma_write,
                           bool rdma_read) {
    VIP_VI_ATTRIBUTES a{};
    a.ReliabilityLevel = level;
    a.MaxTransferSize = mtu ? mtu : n.attrs.MaxTransferSize;
    a.Ptag = n.ptag;
    a.EnableRdmaWrite = rdma_write ? VIP_TRUE : VIP_FALSE;
    a.EnableRdmaRead = rdma_read ? VIP_TRUE : VIP_FALSE;
    return a;
}

void set_desc(VIP_DESCRIPTOR *d, void *buf, uint32_t len, VIP_MEM_HANDLE mh, uint16_t control, uint32_t imm) {
    memset(d, 0, sizeof *d);
    d->CS.Control = control;
    d->CS.ImmediateData = imm;
    d->CS.Length = len;
    d->CS.SegCount = len ? 1 : 0;
    d->DS[0].Local.Data.Address = buf;
    d->DS[0].Local.Handle = mh;
    d->DS[0].Local.Length = len;
}

void set_rdma(VIP_DESCRIPTOR *d, uint16_t op, void *local, uint32_t len, VIP_MEM_HANDLE lmh, uint64_t raddr,
              VIP_MEM_HANDLE rmh, uint16_t extra_control, uint32_t imm) {
    memset(d, 0, sizeof *d);
    d->CS.Control = op | extra_control;
    d->CS.ImmediateData = imm;
    d->CS.Length = len;
    d->CS.SegCount = 2;
    d->DS[0].Remote.Data.AddressBits = raddr;
    d->DS[0].Remote.Handle = rmh;
    d->DS[1].Local.Data.Address = local;
    d->DS[1].Local.Handle = lmh;
    d->DS[1].Local.Length = len;
}

Pair connect_pair(const Nic &na, const Nic &nb, const VIP_VI_ATTRIBUTES &attrs_a,
                  const VIP_VI_ATTRIBUTES &attrs_b, VIP_CQ_HANDLE scq_a, VIP_CQ_HANDLE rcq_a,
                  VIP_CQ_HANDLE scq_b, VIP_CQ_HANDLE rcq_b,
                  const std::function<void(VIP_VI_HANDLE, VIP_VI_HANDLE)> &before_connect) {
    Pair p;
    VIP_VI_ATTRIBUTES aa = attrs_a, ab = attrs_b;
    REQUIRE(VipCreateVi(na.nic, &aa, scq_a, rcq_a, &p.a) == VIP_SUCCESS);
    REQUIRE(VipCreateVi(nb.nic, &ab, scq_b, rcq_b, &p.b) == VIP_SUCCESS);
    if (before_connect) before_connect(p.a, p.b);
    std::string disc = unique_disc("-pair");
    Address server(na.nic, disc), client(nb.nic, disc + "c"), target(nb.nic, disc);
    std::atomic<VIP_RETURN> accepted{VIP_NOT_DONE};
    std::thread t([&] {
        std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 128);
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        VIP_RETURN rc = VipConnectWait(na.nic, server.get(), 10000,
                                       reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), &ra, &conn);
        if (rc == VIP_SUCCESS) rc = VipConnectAccept(conn, p.a);
        accepted = rc;
    });
    VIP_VI_ATTRIBUTES ra;
    VIP_RETURN rc = VIP_NO_MATCH;
    for (int i = 0; i < 1000 && rc == VIP_NO_MATCH; ++i) {
        rc = VipConnectRequest(p.b, client.get(), target.get(), 10000, &ra);
        if (rc == VIP_NO_MATCH) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    t.join();
    REQUIRE(rc == VIP_SUCCESS);
    REQUIRE(accepted.load() == VIP_SUCCESS);
    return p;
}

void destroy_vi(VIP_VI_HANDLE vi) {
    VIP_VI_STATE st;
    if (VipQueryVi(vi, &st, nullptr, nullptr, nullptr) != VIP_SUCCESS) return;
    if (st != VIP_STATE_IDLE) VipDisconnect(vi);
    VIP_DESCRIPTOR *d;
    while (VipSendDone(vi, &d) != VIP_NOT_DONE && VipQueryVi(vi, &st, nullptr, nullptr, nullptr) == VIP_SUCCESS) {
    }
    while (VipRecvDone(vi, &d) != VIP_NOT_DONE && VipQueryVi(vi, &st, nullptr, nullptr, nullptr) == VIP_SUCCESS) {
    }
    VipDestroyVi(vi);
}

int spawn_child(const std::function<int()> &fn) {
    fflush(nullptr);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int code = 99;
        try {
            code = fn();
        } catch (...) {
            code = 99;
        }
        fflush(nullptr);
        _exit(code);
    }
    return pid;
}

int wait_child(int pid, int timeout_s) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        if (r < 0 && errno != EINTR) return -1;
        if (std::chrono::steady_clock::now() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

int run_child(const std::function<int()> &fn, int timeout_s) { return wait_child(spawn_child(fn), timeout_s); }

int thread_count() {
    int n = 0;
    if (DIR *d = opendir("/proc/self/task")) {
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.') ++n;
        closedir(d);
    }
    return n;
}

void fill_pattern(uint8_t *p, size_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = static_cast<uint8_t>(x);
    }
}

bool check_pattern(const uint8_t *p, size_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        if (p[i] != static_cast<uint8_t>(x)) return false;
    }
    return true;
}

uint64_t checksum(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

} // namespace vt
