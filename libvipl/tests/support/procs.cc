// The listener below needs Catch2's reporter interfaces.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include "procs.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace vt {

namespace {

std::atomic<int> g_failed{0};

struct FailureCounter : Catch::TestEventListenerBase {
    using TestEventListenerBase::TestEventListenerBase;
    bool assertionEnded(Catch::AssertionStats const &stats) override {
        if (!stats.assertionResult.isOk()) ++g_failed;
        return true;
    }
};

} // namespace

int failed_assertions() {
    return g_failed;
}

int spawn_checked(const std::function<int()> &fn) {
    return vt::spawn_child([&] {
        int before = failed_assertions();
        int code = fn();
        return code ? code : failed_assertions() != before ? 98 : 0;
    });
}

int run_checked(const std::function<int()> &fn, int timeout_s) {
    return vt::wait_child(spawn_checked(fn), timeout_s);
}

// ---------------------------------------------------------------- Channel

Channel::Channel() {
    if (pipe2(down, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0) abort();
}

Channel::~Channel() {
    for (int fd : {down[0], down[1], up[0], up[1]})
        if (fd >= 0) ::close(fd);
}

void Channel::in_child() {
    child = true;
    ::close(down[1]);
    ::close(up[0]);
    down[1] = up[0] = -1;
}

void Channel::in_parent() {
    ::close(down[0]);
    ::close(up[1]);
    down[0] = up[1] = -1;
}

bool Channel::send(uint64_t v) {
    int fd = child ? up[1] : down[1];
    return write(fd, &v, sizeof v) == sizeof v;
}

bool Channel::recv(uint64_t *v, int timeout_ms) {
    int fd = child ? down[0] : up[0];
    double end = now_ms() + timeout_ms;
    for (;;) {
        pollfd p{fd, POLLIN, 0};
        int left = static_cast<int>(end - now_ms());
        if (left < 0) left = 0;
        int n = poll(&p, 1, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        ssize_t r = read(fd, v, sizeof *v);
        if (r < 0 && errno == EINTR) continue;
        return r == sizeof *v;
    }
}

// ------------------------------------------------------------------ Child

Child::~Child() {
    if (pid > 0) {
        ::kill(pid, SIGKILL);
        int s;
        waitpid(pid, &s, 0);
    }
}

int Child::wait(int timeout_s) {
    int s = vt::wait_child(pid, timeout_s);
    pid = -1;
    return s;
}

void Child::kill_now(int sig) {
    if (pid > 0) ::kill(pid, sig);
}

// --------------------------------------------------------------------- Ep

bool FirstError::fail(const std::string &what) {
    if (err.empty()) err = what;
    return false;
}

bool FirstError::check(VIP_RETURN rc, const char *what, VIP_RETURN want) {
    if (rc == want) return true;
    return fail(fmt("%s: %s (wanted %s)", what, VipReturnString(rc), VipReturnString(want)));
}

bool FirstError::accept_on(VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, const std::string &disc,
                           int timeout_ms) {
    std::vector<uint8_t> local = address(nic, disc);
    if (local.empty()) return fail("VipNSGetHostByName failed");
    AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    if (!check(VipConnectWait(nic, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()), timeout_ms,
                              remote.get(), &ra, &conn),
               "VipConnectWait"))
        return false;
    return check(VipConnectAccept(conn, vi), "VipConnectAccept");
}

bool FirstError::connect_through(VIP_NIC_HANDLE ns, VIP_VI_HANDLE vi, const std::string &disc,
                                 int timeout_ms) {
    std::vector<uint8_t> local = address(ns, disc + "c"), remote = address(ns, disc);
    if (local.empty() || remote.empty()) return fail("VipNSGetHostByName failed");
    return check(connect_request(vi, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()),
                                 reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), timeout_ms),
                 "VipConnectRequest");
}

bool Ep::open(size_t bytes, const Opts &o) {
    if (!check(VipOpenNic(o.device.c_str(), &nic), "VipOpenNic")) return false;
    if (!check(VipQueryNic(nic, &na), "VipQueryNic")) return false;
    if (!check(VipCreatePtag(nic, &ptag), "VipCreatePtag")) return false;
    if (o.send_cq && !check(VipCreateCQ(nic, 8192, &scq), "VipCreateCQ")) return false;
    if (o.recv_cq && !check(VipCreateCQ(nic, 8192, &rcq), "VipCreateCQ")) return false;
    size = (bytes + 4095) & ~size_t(4095);
    void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return fail("mmap failed");
    mem = static_cast<uint8_t *>(p);
    VIP_MEM_ATTRIBUTES ma{ptag, o.rdma_write ? VIP_TRUE : VIP_FALSE,
                          o.rdma_read ? VIP_TRUE : VIP_FALSE, VIP_FALSE};
    if (!check(VipRegisterMem(nic, mem, size, &ma, &mh), "VipRegisterMem")) return false;
    VIP_VI_ATTRIBUTES va{};
    va.ReliabilityLevel = o.level;
    va.MaxTransferSize = o.mtu ? o.mtu : na.MaxTransferSize;
    va.Ptag = ptag;
    va.EnableRdmaWrite = o.rdma_write ? VIP_TRUE : VIP_FALSE;
    va.EnableRdmaRead = o.rdma_read ? VIP_TRUE : VIP_FALSE;
    return check(VipCreateVi(nic, &va, scq, rcq, &vi), "VipCreateVi");
}

bool Ep::accept(const std::string &disc, int timeout_ms) {
    return accept_on(nic, vi, disc, timeout_ms);
}

bool Ep::connect(const std::string &disc, int timeout_ms) {
    return connect_through(nic, vi, disc, timeout_ms);
}

void Ep::close() {
    if (vi) vt::destroy_vi(vi);
    if (scq) VipDestroyCQ(scq);
    if (rcq) VipDestroyCQ(rcq);
    if (nic && mem) VipDeregisterMem(nic, mem, mh);
    if (nic) VipCloseNic(nic);
    if (mem) munmap(mem, size);
    vi = nullptr;
    scq = rcq = nullptr;
    nic = nullptr;
    mem = nullptr;
}

bool Ep::post_send(VIP_DESCRIPTOR *d) {
    return check(VipPostSend(vi, d, mh), "VipPostSend");
}

bool Ep::post_recv(VIP_DESCRIPTOR *d) {
    return check(VipPostRecv(vi, d, mh), "VipPostRecv");
}

static bool completed(Ep &ep, const char *what, VIP_RETURN rc, VIP_DESCRIPTOR *got,
                      VIP_DESCRIPTOR *want) {
    if (rc != VIP_SUCCESS)
        return ep.fail(fmt("%s: %s (status 0x%x)", what, VipReturnString(rc),
                           rc == VIP_DESCRIPTOR_ERROR && got ? got->CS.Status : 0));
    if (got != want)
        return ep.fail(fmt("%s: returned %p, expected %p", what, (void *)got, (void *)want));
    if (!(got->CS.Status & VIP_STATUS_DONE) || (got->CS.Status & VIP_STATUS_ERROR_MASK))
        return ep.fail(fmt("%s: status 0x%x", what, got->CS.Status));
    return true;
}

bool Ep::wait_send(VIP_DESCRIPTOR *want, int timeout_ms) {
    VIP_DESCRIPTOR *d = nullptr;
    VIP_RETURN rc = VipSendWait(vi, timeout_ms, &d);
    return completed(*this, "VipSendWait", rc, d, want);
}

bool Ep::wait_recv(VIP_DESCRIPTOR *want, int timeout_ms) {
    VIP_DESCRIPTOR *d = nullptr;
    VIP_RETURN rc = VipRecvWait(vi, timeout_ms, &d);
    return completed(*this, "VipRecvWait", rc, d, want);
}

VIP_VI_STATE Ep::state() {
    VIP_VI_STATE s = VIP_STATE_IDLE;
    VipQueryVi(vi, &s, nullptr, nullptr, nullptr);
    return s;
}

VIP_VI_COUNTERS Ep::counters() {
    VIP_VI_COUNTERS c{};
    VipQueryViCounters(vi, &c);
    return c;
}

// ---------------------------------------------------------- /proc views

static std::vector<std::string> lines_with(const char *file, const std::string &needle) {
    std::vector<std::string> out;
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line))
        if (line.find(needle) != std::string::npos) out.push_back(line);
    return out;
}

std::vector<std::string> maps_with(const std::string &needle) {
    return lines_with("/proc/self/maps", needle);
}

std::vector<std::string> unix_sockets_with(const std::string &needle) {
    return lines_with("/proc/net/unix", needle);
}

std::vector<std::string> fds_with(const std::string &needle) {
    std::vector<std::string> out;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return out;
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        char link[512];
        std::string path = std::string("/proc/self/fd/") + e->d_name;
        ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
        if (n <= 0) continue;
        link[n] = 0;
        if (strstr(link, needle.c_str())) out.push_back(std::string(e->d_name) + " -> " + link);
    }
    closedir(d);
    return out;
}

std::set<std::string> dir_entries(const char *dir) {
    std::set<std::string> out;
    if (DIR *d = opendir(dir)) {
        while (dirent *e = readdir(d))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) out.insert(e->d_name);
        closedir(d);
    }
    return out;
}

std::vector<std::string> linked_shared_objects() {
    std::vector<std::string> out;
    std::vector<std::string> maps = lines_with("/proc/self/maps", "");
    for (const std::string &line : maps) {
        // "start-end perms offset dev inode path": only shared mappings can be seen by others.
        size_t sp = line.find(' ');
        if (sp == std::string::npos || line.size() < sp + 5 || line[sp + 4] != 's') continue;
        std::string p = "/proc/self/map_files/" + line.substr(0, sp);
        struct stat sb;
        if (stat(p.c_str(), &sb) != 0)
            out.push_back("cannot stat " + p + ": " + strerror(errno));
        else if (sb.st_nlink != 0)
            out.push_back(line + fmt(" (%lu links)", static_cast<unsigned long>(sb.st_nlink)));
    }
    DIR *d = opendir("/proc/self/fd");
    while (dirent *e = d ? readdir(d) : nullptr) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd <= 2) continue;
        std::string p = std::string("/proc/self/fd/") + e->d_name;
        struct stat sb;
        char link[512] = {};
        if (stat(p.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_nlink != 0 &&
            readlink(p.c_str(), link, sizeof link - 1) > 0)
            out.push_back(fmt("descriptor %d -> %s (%lu links)", fd, link,
                              static_cast<unsigned long>(sb.st_nlink)));
    }
    if (d) closedir(d);
    return out;
}

std::string join(const std::vector<std::string> &v) {
    std::string s;
    for (const std::string &x : v) s += (s.empty() ? "" : "\n") + x;
    return s.empty() ? "(none)" : s;
}

} // namespace vt

using ChildFailureCounter = vt::FailureCounter;
CATCH_REGISTER_LISTENER(ChildFailureCounter)
