#include "support.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <random>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace vt {

bool readable(int fd, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    int r;
    do r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    return r > 0 && (p.revents & POLLIN);
}

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

const std::string &device() {
    return devices().front();
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
    close();
}

void Nic::close() {
    if (nic) VipCloseNic(nic);
    nic = nullptr;
}

Memory::Memory(const Nic &n, size_t bytes, bool rdma_write, bool rdma_read,
               VIP_PROTECTION_HANDLE ptag)
    : nic(n.nic), size(bytes) {
    void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    base = static_cast<uint8_t *>(p);
    VIP_MEM_ATTRIBUTES ma{};
    ma.Ptag = ptag ? ptag : n.ptag;
    ma.EnableRdmaWrite = rdma_write ? VIP_TRUE : VIP_FALSE;
    ma.EnableRdmaRead = rdma_read ? VIP_TRUE : VIP_FALSE;
    REQUIRE(VipRegisterMem(nic, base, size, &ma, &mh) == VIP_SUCCESS);
}

Memory::~Memory() {
    // The NIC may already be closed by the test: deregistration then fails
    // harmlessly.  While a descriptor still uses the region (a test that
    // failed half-way), the library may write to it when the NIC closes: keep
    // the memory mapped.
    if (VipDeregisterMem(nic, base, mh) == VIP_INVALID_STATE) return;
    munmap(base, size);
}

Address::Address(VIP_NIC_HANDLE nic, const std::string &disc, const char *host)
    : bytes(sizeof(VIP_NET_ADDRESS) + 64 + disc.size()) {
    VIP_NET_ADDRESS *a = get();
    REQUIRE(VipNSGetHostByName(nic, const_cast<char *>(host), a, 0) == VIP_SUCCESS);
    a->DiscriminatorLen = static_cast<VIP_UINT16>(disc.size());
    memcpy(a->HostAddress + a->HostAddressLen, disc.data(), disc.size());
}

VIP_VI_ATTRIBUTES vi_attrs(const Nic &n, VIP_RELIABILITY_LEVEL level, VIP_ULONG mtu,
                           bool rdma_write, bool rdma_read) {
    VIP_VI_ATTRIBUTES a{};
    a.ReliabilityLevel = level;
    a.MaxTransferSize = mtu ? mtu : n.attrs.MaxTransferSize;
    a.Ptag = n.ptag;
    a.EnableRdmaWrite = rdma_write ? VIP_TRUE : VIP_FALSE;
    a.EnableRdmaRead = rdma_read ? VIP_TRUE : VIP_FALSE;
    return a;
}

// Both build the descriptor aside and copy it in: a test may aim them at a
// misaligned place on purpose (the library must refuse it), and a sanitizer
// must see only what the library does there.
void set_desc(VIP_DESCRIPTOR *d, void *buf, uint32_t len, VIP_MEM_HANDLE mh, uint16_t control,
              uint32_t imm) {
    VIP_DESCRIPTOR t;
    memset(&t, 0, sizeof t);
    t.CS.Control = control;
    t.CS.ImmediateData = imm;
    t.CS.Length = len;
    t.CS.SegCount = len ? 1 : 0;
    t.DS[0].Local.Data.Address = buf;
    t.DS[0].Local.Handle = mh;
    t.DS[0].Local.Length = len;
    memcpy(static_cast<void *>(d), &t, sizeof t);
}

void set_rdma(VIP_DESCRIPTOR *d, uint16_t op, void *local, uint32_t len, VIP_MEM_HANDLE lmh,
              uint64_t raddr, VIP_MEM_HANDLE rmh, uint16_t extra_control, uint32_t imm) {
    VIP_DESCRIPTOR t;
    memset(&t, 0, sizeof t);
    t.CS.Control = op | extra_control;
    t.CS.ImmediateData = imm;
    t.CS.Length = len;
    t.CS.SegCount = 2;
    t.DS[0].Remote.Data.AddressBits = raddr;
    t.DS[0].Remote.Handle = rmh;
    t.DS[1].Local.Data.Address = local;
    t.DS[1].Local.Handle = lmh;
    t.DS[1].Local.Length = len;
    memcpy(static_cast<void *>(d), &t, sizeof t);
}

void set_sg(VIP_DESCRIPTOR *d, const std::vector<Seg> &segs, uint16_t control, uint32_t imm) {
    memset(&d->CS, 0, sizeof d->CS);
    d->CS.Control = control;
    d->CS.ImmediateData = imm;
    d->CS.SegCount = static_cast<uint16_t>(segs.size());
    uint32_t total = 0;
    for (size_t i = 0; i < segs.size(); ++i) {
        VIP_DATA_SEGMENT &s = (&d->DS[0] + i)->Local;
        s.Data.Address = segs[i].addr;
        s.Handle = segs[i].mh;
        s.Length = segs[i].len;
        total += segs[i].len;
    }
    d->CS.Length = total;
}

void set_rdma_sg(VIP_DESCRIPTOR *d, uint16_t op, uint64_t raddr, VIP_MEM_HANDLE rmh,
                 const std::vector<Seg> &segs, uint16_t extra_control, uint32_t imm) {
    memset(&d->CS, 0, sizeof d->CS);
    d->CS.Control = op | extra_control;
    d->CS.ImmediateData = imm;
    d->CS.SegCount = static_cast<uint16_t>(segs.size() + 1);
    d->DS[0].Remote.Data.AddressBits = raddr;
    d->DS[0].Remote.Handle = rmh;
    d->DS[0].Remote.Reserved = 0;
    uint32_t total = 0;
    for (size_t i = 0; i < segs.size(); ++i) {
        VIP_DATA_SEGMENT &s = (&d->DS[0] + i + 1)->Local;
        s.Data.Address = segs[i].addr;
        s.Handle = segs[i].mh;
        s.Length = segs[i].len;
        total += segs[i].len;
    }
    d->CS.Length = total;
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
        VIP_RETURN rc =
            VipConnectWait(na.nic, server.get(), 10000,
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

VIP_RETURN connect_request(VIP_VI_HANDLE vi, VIP_NET_ADDRESS *local, VIP_NET_ADDRESS *remote,
                           int timeout_ms, VIP_VI_ATTRIBUTES *remote_attrs) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    VIP_VI_ATTRIBUTES ra;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        end - std::chrono::steady_clock::now())
                        .count();
        VIP_RETURN rc = VipConnectRequest(vi, local, remote, left > 0 ? left : 0,
                                          remote_attrs ? remote_attrs : &ra);
        if (rc != VIP_NO_MATCH || left <= 0) return rc;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

void destroy_vi(VIP_VI_HANDLE vi) {
    VIP_VI_STATE st;
    if (VipQueryVi(vi, &st, nullptr, nullptr, nullptr) != VIP_SUCCESS) return;
    if (st != VIP_STATE_IDLE) VipDisconnect(vi);
    VIP_DESCRIPTOR *d;
    while (VipSendDone(vi, &d) != VIP_NOT_DONE &&
           VipQueryVi(vi, &st, nullptr, nullptr, nullptr) == VIP_SUCCESS) {
    }
    while (VipRecvDone(vi, &d) != VIP_NOT_DONE &&
           VipQueryVi(vi, &st, nullptr, nullptr, nullptr) == VIP_SUCCESS) {
    }
    VipDestroyVi(vi);
}

VIP_VI_STATE vi_state(VIP_VI_HANDLE vi) {
    VIP_VI_STATE st = VIP_STATE_IDLE;
    REQUIRE(VipQueryVi(vi, &st, nullptr, nullptr, nullptr) == VIP_SUCCESS);
    return st;
}

bool drive_until(VIP_VI_HANDLE vi, const std::function<bool()> &pred, int timeout_ms,
                 std::vector<Taken> *taken) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        if (pred()) return true;
        for (bool recv : {false, true}) {
            VIP_DESCRIPTOR *d = nullptr;
            VIP_RETURN rc = recv ? VipRecvDone(vi, &d) : VipSendDone(vi, &d);
            if ((rc == VIP_SUCCESS || rc == VIP_DESCRIPTOR_ERROR) && taken)
                taken->push_back(Taken{d, rc, recv});
        }
        if (std::chrono::steady_clock::now() > end) return pred();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

bool drive_to_state(VIP_VI_HANDLE vi, VIP_VI_STATE state, int timeout_ms,
                    std::vector<Taken> *taken) {
    return drive_until(
        vi,
        [&] {
            VIP_VI_STATE st;
            return VipQueryVi(vi, &st, nullptr, nullptr, nullptr) == VIP_SUCCESS && st == state;
        },
        timeout_ms, taken);
}

Pump::Pump(VIP_VI_HANDLE vi) : vi_(vi) {
    thread_ = std::thread([this] {
        while (!stop_.load()) {
            VIP_DESCRIPTOR *d;
            VIP_RETURN rc = VipSendDone(vi_, &d);
            if (rc == VIP_SUCCESS || rc == VIP_DESCRIPTOR_ERROR) ++stray;
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    });
}

Pump::~Pump() {
    stop_ = true;
    thread_.join();
}

void ErrorLog::install(VIP_NIC_HANDLE nic) {
    REQUIRE(VipErrorCallback(nic, this, &ErrorLog::handler) == VIP_SUCCESS);
}

void ErrorLog::handler(VIP_PVOID context, VIP_ERROR_DESCRIPTOR *err) {
    auto *log = static_cast<ErrorLog *>(context);
    std::lock_guard<std::mutex> g(log->m_);
    log->errors_.push_back(*err);
    log->cv_.notify_all();
}

bool ErrorLog::wait_for(VIP_ERROR_CODE code, VIP_VI_HANDLE vi, int timeout_ms,
                        VIP_ERROR_DESCRIPTOR *out) {
    std::unique_lock<std::mutex> g(m_);
    auto match = [&] {
        for (auto &e : errors_)
            if (e.ErrorCode == code && (!vi || e.ViHandle == vi)) {
                if (out) *out = e;
                return true;
            }
        return false;
    };
    return cv_.wait_for(g, std::chrono::milliseconds(timeout_ms), match);
}

bool ErrorLog::wait_any(VIP_VI_HANDLE vi, int timeout_ms, VIP_ERROR_DESCRIPTOR *out) {
    std::unique_lock<std::mutex> g(m_);
    auto match = [&] {
        for (auto &e : errors_)
            if (e.ViHandle == vi) {
                if (out) *out = e;
                return true;
            }
        return false;
    };
    return cv_.wait_for(g, std::chrono::milliseconds(timeout_ms), match);
}

std::vector<VIP_ERROR_DESCRIPTOR> ErrorLog::all() {
    std::lock_guard<std::mutex> g(m_);
    return errors_;
}

Pipe::Pipe() {
    REQUIRE(pipe2(fd, O_CLOEXEC) == 0);
}

Pipe::~Pipe() {
    for (int f : fd)
        if (f >= 0) close(f);
}

void Pipe::put(char c) {
    ssize_t n;
    do n = write(fd[1], &c, 1);
    while (n < 0 && errno == EINTR);
}

bool Pipe::get(char *c, int timeout_ms) {
    pollfd p{fd[0], POLLIN, 0};
    int r;
    do r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r <= 0) return false;
    return read(fd[0], c, 1) == 1;
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

int run_child(const std::function<int()> &fn, int timeout_s) {
    return wait_child(spawn_child(fn), timeout_s);
}

int spawn_fresh(const std::string &test_name, const std::vector<std::string> &env) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    REQUIRE(n > 0);
    exe[n] = 0;
    // Everything is built before fork: the child only calls execve.
    std::vector<std::string> vars = env;
    for (char **e = environ; *e; ++e) {
        std::string kv = *e;
        std::string key = kv.substr(0, kv.find('='));
        bool overridden = false;
        for (const std::string &x : env)
            if (x.compare(0, key.size() + 1, key + "=") == 0) overridden = true;
        if (!overridden) vars.push_back(kv);
    }
    std::vector<char *> envp;
    for (std::string &v : vars) envp.push_back(&v[0]);
    envp.push_back(nullptr);
    std::string name = test_name;
    // NoTests: a name that matches nothing must not pass silently.
    char a1[] = "-w", a2[] = "NoTests", a3[] = "-r", a4[] = "compact";
    char *argv[] = {exe, &name[0], a1, a2, a3, a4, nullptr};
    fflush(nullptr);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        execve(exe, argv, envp.data());
        _exit(127);
    }
    return pid;
}

int run_fresh(const std::string &test_name, const std::vector<std::string> &env, int timeout_s) {
    return wait_child(spawn_fresh(test_name, env), timeout_s);
}

std::string config_value(const char *key) {
    for (VIP_ULONG i = 0; i < VipConfigCount(); ++i) {
        VIP_CONFIG_INFO ci;
        if (VipConfigInfo(i, &ci) == VIP_SUCCESS && strcmp(ci.Name, key) == 0) return ci.Value;
    }
    return "";
}

std::string status_text(int status) {
    if (status == -1) return "timeout (killed)";
    if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
    return "status " + std::to_string(status);
}

int thread_count() {
    int n = 0;
    if (DIR *d = opendir("/proc/self/task")) {
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.') ++n;
        closedir(d);
    }
    return n;
}

std::vector<VIP_PVOID> garbage_handles(size_t random_count) {
    static int some_variable;
    std::vector<VIP_PVOID> out = {reinterpret_cast<VIP_PVOID>(1),
                                  reinterpret_cast<VIP_PVOID>(~0ull),
                                  reinterpret_cast<VIP_PVOID>(0x1000), &some_variable};
    std::mt19937_64 rng(0x5eed1234abcdull);
    for (size_t i = 0; i < random_count; ++i) out.push_back(reinterpret_cast<VIP_PVOID>(rng()));
    return out;
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
