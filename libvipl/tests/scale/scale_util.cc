#include "scale_util.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace vt {

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

namespace {

// "Key:   123 kB" lines: the number after key, or -1.
long long field(const char *path, const char *key) {
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    char line[256];
    size_t n = strlen(key);
    long long v = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            v = atoll(line + n + 1);
            break;
        }
    fclose(f);
    return v;
}

int count_lines_with(const char *path, const char *needle) {
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (!needle || strstr(line, needle)) ++n;
    fclose(f);
    return n;
}

} // namespace

MemInfo meminfo() {
    // The kernel folds each CPU's counters into these totals only now and
    // then (hundreds of KiB off); reading stat_refresh (root) folds them now.
    if (FILE *r = fopen("/proc/sys/vm/stat_refresh", "re")) {
        char c;
        (void)!fread(&c, 1, 1, r);
        fclose(r);
    }
    // One read, so that the fields belong to the same moment.
    MemInfo m;
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f) return m;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char key[64];
        long long v;
        if (sscanf(line, "%63[^:]: %lld", key, &v) != 2) continue;
        if (!strcmp(key, "MemFree")) m.mem_free = v;
        if (!strcmp(key, "MemAvailable")) m.mem_available = v;
        if (!strcmp(key, "Shmem")) m.shmem = v;
        if (!strcmp(key, "Slab")) m.slab = v;
        if (!strcmp(key, "PageTables")) m.page_tables = v;
        if (!strcmp(key, "KernelStack")) m.kernel_stack = v;
    }
    fclose(f);
    if (FILE *s = fopen("/proc/slabinfo", "re")) {
        long long inodes = 0, per = 0, bytes = 0;
        while (fgets(line, sizeof line, s)) {
            char name[64];
            long long active, total, size;
            if (sscanf(line, "%63s %lld %lld %lld", name, &active, &total, &size) != 4) continue;
            bytes += active * size;
            if (!strcmp(name, "proc_inode_cache")) {
                inodes = active;
                per += size;
            } else if (!strcmp(name, "dentry") || !strcmp(name, "lsm_inode_cache")) {
                per += size;
            }
        }
        fclose(s);
        m.proc_inodes_kib = inodes * per / 1024;
        m.slab_objects_kib = bytes / 1024;
    }
    return m;
}

double slab_growth(const MemInfo &a, const MemInfo &b) {
    double proc = static_cast<double>(b.proc_inodes_kib - a.proc_inodes_kib);
    if (a.slab_objects_kib >= 0 && b.slab_objects_kib >= 0)
        return static_cast<double>(b.slab_objects_kib - a.slab_objects_kib) - proc;
    return static_cast<double>(b.slab - a.slab) - proc;
}

void settle(double max_s) {
    double end = now_s() + max_s;
    MemInfo a = meminfo();
    while (now_s() < end) {
        usleep(100000);
        MemInfo b = meminfo();
        long long moved = std::llabs(b.slab - a.slab) + std::llabs(b.shmem - a.shmem);
        if (moved < 64) return;
        a = b;
    }
}

ProcMem proc_mem(pid_t pid) {
    std::string path = "/proc/" + std::to_string(pid) + "/smaps_rollup";
    ProcMem p;
    p.rss = field(path.c_str(), "Rss");
    p.pss = field(path.c_str(), "Pss");
    p.pss_anon = field(path.c_str(), "Pss_Anon");
    p.pss_shmem = field(path.c_str(), "Pss_Shmem");
    return p;
}

// Linux 6.2 and later give the number of open descriptors as the size of
// /proc/PID/fd: no entry of the directory is read, so none is instantiated
// (reading them would grow the dentry and proc inode caches by about 1 KiB
// per descriptor and distort the memory figures).
static int fd_count_at(const std::string &dir) {
    struct stat st;
    if (stat(dir.c_str(), &st) == 0 && st.st_size > 0) return static_cast<int>(st.st_size);
    DIR *d = opendir(dir.c_str());
    if (!d) return -1;
    int n = 0;
    while (dirent *e = readdir(d))
        if (e->d_name[0] != '.') ++n;
    closedir(d);
    return dir == "/proc/self/fd" ? n - 1 : n; // the directory's own descriptor
}

int fd_count() {
    return fd_count_at("/proc/self/fd");
}

int map_count() {
    return count_lines_with("/proc/self/maps", nullptr);
}

int fd_count(pid_t pid) {
    return fd_count_at("/proc/" + std::to_string(pid) + "/fd");
}

int map_count(pid_t pid) {
    return count_lines_with(("/proc/" + std::to_string(pid) + "/maps").c_str(), nullptr);
}

int maps_with(const char *needle) {
    return count_lines_with("/proc/self/maps", needle);
}

int unix_socket_count(const std::string &needle) {
    return count_lines_with("/proc/net/unix", needle.c_str());
}

static bool may_raise_hard_limits() {
    long long caps = -1;
    if (FILE *f = fopen("/proc/self/status", "re")) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "CapEff:", 7)) caps = strtoll(line + 7, nullptr, 16);
        fclose(f);
    }
    return caps >= 0 && (caps >> 24) & 1; // CAP_SYS_RESOURCE
}

static rlim_t nr_open() {
    rlim_t v = 1 << 20;
    if (FILE *f = fopen("/proc/sys/fs/nr_open", "re")) {
        unsigned long long x;
        if (fscanf(f, "%llu", &x) == 1) v = x;
        fclose(f);
    }
    return v;
}

rlim_t nofile_reachable() {
    rlimit r;
    getrlimit(RLIMIT_NOFILE, &r);
    if (may_raise_hard_limits()) return std::max(r.rlim_max, nr_open());
    return r.rlim_max;
}

std::string raise_nofile(rlim_t want) {
    rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0) return strerror(errno);
    if (r.rlim_cur >= want) return "";
    rlimit n = r;
    n.rlim_cur = want;
    if (n.rlim_max < want) n.rlim_max = want;
    if (setrlimit(RLIMIT_NOFILE, &n) != 0)
        return fmt("setrlimit(RLIMIT_NOFILE, %llu): %s (hard limit %llu)",
                   static_cast<unsigned long long>(want), strerror(errno),
                   static_cast<unsigned long long>(r.rlim_max));
    return "";
}

bool warm_up_library() {
    VIP_NIC_HANDLE nic;
    if (VipOpenNic("shm0", &nic) != VIP_SUCCESS) return false;
    VIP_PROTECTION_HANDLE ptag;
    bool ok = VipCreatePtag(nic, &ptag) == VIP_SUCCESS;
    if (ok) {
        VIP_VI_ATTRIBUTES a{};
        a.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
        a.MaxTransferSize = 4096;
        a.Ptag = ptag;
        VIP_VI_HANDLE vi;
        ok = VipCreateVi(nic, &a, nullptr, nullptr, &vi) == VIP_SUCCESS &&
             VipDestroyVi(vi) == VIP_SUCCESS;
        ok = VipDestroyPtag(nic, ptag) == VIP_SUCCESS && ok;
    }
    return VipCloseNic(nic) == VIP_SUCCESS && ok;
}

Link::Link() {
    if (pipe2(down, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0) {
        perror("pipe2");
        abort();
    }
}

Link::~Link() {
    for (int f : {down[0], down[1], up[0], up[1]})
        if (f >= 0) close(f);
}

void Link::in_child() {
    is_child = true;
    close(down[1]);
    close(up[0]);
    down[1] = up[0] = -1;
}

void Link::in_parent() {
    close(down[0]);
    close(up[1]);
    down[0] = up[1] = -1;
}

bool Link::put(const void *p, size_t n) {
    int fd = is_child ? up[1] : down[1];
    ssize_t w;
    do w = write(fd, p, n);
    while (w < 0 && errno == EINTR);
    return w == static_cast<ssize_t>(n);
}

bool Link::get(void *p, size_t n, int timeout_ms) {
    int fd = is_child ? down[0] : up[0];
    double end = now_s() + timeout_ms / 1000.0;
    size_t got = 0;
    while (got < n) {
        int left = static_cast<int>((end - now_s()) * 1000);
        if (left < 0) return false;
        pollfd pf{fd, POLLIN, 0};
        int r = poll(&pf, 1, left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        ssize_t k = read(fd, static_cast<char *>(p) + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        got += k;
    }
    return true;
}

Workers::~Workers() {
    for (pid_t p : pids)
        if (p > 0) kill(p, SIGKILL);
    for (pid_t p : pids)
        if (p > 0) waitpid(p, nullptr, 0);
}

std::vector<int> Workers::wait_all(double deadline) {
    std::vector<int> status(pids.size(), -1);
    size_t left = 0;
    for (pid_t p : pids) left += p > 0;
    while (left > 0) {
        for (size_t i = 0; i < pids.size(); ++i) {
            if (pids[i] <= 0) continue;
            int s;
            pid_t r = waitpid(pids[i], &s, WNOHANG);
            if (r == pids[i] || (r < 0 && errno == ECHILD)) {
                status[i] = r == pids[i] ? s : -1;
                pids[i] = -1;
                --left;
            }
        }
        if (left == 0) break;
        if (now_s() > deadline) {
            for (pid_t &p : pids)
                if (p > 0) {
                    kill(p, SIGKILL);
                    waitpid(p, nullptr, 0);
                    p = -1;
                }
            break;
        }
        usleep(2000);
    }
    return status;
}

void fill(uint8_t *p, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = static_cast<uint8_t>(x >> 24);
    }
}

bool check(const uint8_t *p, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (p[i] != static_cast<uint8_t>(x >> 24)) return false;
    }
    return true;
}

} // namespace vt
