#include "thr_util.h"

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <fstream>
#include <link.h>
#include <sched.h>
#include <sys/syscall.h>
#include <thread>
#include <ucontext.h>
#include <unistd.h>

namespace vt {

using vt::fmt;
using vt::now_ms;
using vt::sleep_ms;

void pin_cpu(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set); // 0: the calling thread
}

pid_t tid() {
    return static_cast<pid_t>(syscall(SYS_gettid));
}

void Notes::add(const std::string &s) {
    std::lock_guard<std::mutex> g(m_);
    v_.push_back(s);
}

std::vector<std::string> Notes::all() {
    std::lock_guard<std::mutex> g(m_);
    return v_;
}

size_t Notes::size() {
    std::lock_guard<std::mutex> g(m_);
    return v_.size();
}

std::string Notes::text(size_t max) {
    std::lock_guard<std::mutex> g(m_);
    std::string s;
    for (size_t i = 0; i < v_.size() && i < max; ++i) s += (s.empty() ? "" : "\n") + v_[i];
    if (v_.size() > max) s += fmt("\n... and %zu more", v_.size() - max);
    return s.empty() ? "(none)" : s;
}

long blocked_syscall(pid_t thread) {
    std::string path = fmt("/proc/self/task/%d/syscall", thread);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -2;
    char buf[256] = {};
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -2;
    if (strncmp(buf, "running", 7) == 0) return -1;
    char *end = nullptr;
    long nr = strtol(buf, &end, 10);
    return end == buf ? -2 : nr;
}

bool is_sleep_syscall(long nr) {
#if defined(__x86_64__)
    // poll, ppoll, epoll_wait, epoll_pwait, epoll_pwait2
    return nr == 7 || nr == 271 || nr == 232 || nr == 281 || nr == 441;
#else
#ifdef SYS_ppoll
    if (nr == SYS_ppoll) return true;
#endif
#ifdef SYS_epoll_pwait
    if (nr == SYS_epoll_pwait) return true;
#endif
    return nr == 441;
#endif
}

bool wait_asleep(pid_t thread, int timeout_ms) {
    double end = now_ms() + timeout_ms;
    // Twice in a row: a thread that only passes through the call is not asleep.
    int seen = 0;
    while (now_ms() < end) {
        if (is_sleep_syscall(blocked_syscall(thread))) {
            if (++seen == 2) return true;
        } else {
            seen = 0;
        }
        sleep_ms(1);
    }
    return false;
}

namespace {

// Where the C library's wrappers of the calls a wait sleeps in lie: an
// interrupted poll(..., 0) (a liveness check) or futex is not a sleep.
// recv: the tcp provider's lone sleeper blocks in the socket's read (its
// other reads never block, so they never end with EINTR).
struct Range {
    uintptr_t begin = 0, end = 0;
};
struct SleepRanges {
    Range r[5];
    bool complete = true;
    SleepRanges() {
        const char *names[] = {"ppoll", "epoll_pwait2", "epoll_wait", "epoll_pwait", "recv"};
        for (int i = 0; i < 5; ++i) {
            void *p = dlsym(RTLD_DEFAULT, names[i]);
            Dl_info info;
            void *extra = nullptr;
            if (!p || !dladdr1(p, &info, &extra, RTLD_DL_SYMENT) || !extra) {
                complete = false;
                continue;
            }
            const auto *sym = static_cast<const ElfW(Sym) *>(extra);
            if (!sym->st_size) {
                complete = false;
                continue;
            }
            r[i].begin = reinterpret_cast<uintptr_t>(p);
            r[i].end = r[i].begin + sym->st_size;
        }
    }
    bool contains(uintptr_t pc) const {
        for (const Range &x : r)
            if (pc >= x.begin && pc < x.end) return true;
        return false;
    }
};
const SleepRanges g_sleep_ranges;

} // namespace

bool interrupted_syscall_known() {
#if defined(__x86_64__)
    return g_sleep_ranges.complete;
#else
    return false;
#endif
}

bool interrupted_syscall(const void *ucontext) {
#if defined(__x86_64__)
    // The kernel saved the registers as they are when the system call
    // returns: RAX holds -EINTR and RIP follows the 2-byte `syscall`, inside
    // one of the sleeping calls' wrappers.
    const auto *uc = static_cast<const ucontext_t *>(ucontext);
    if (uc->uc_mcontext.gregs[REG_RAX] != -EINTR) return false;
    uintptr_t pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
    if (!g_sleep_ranges.contains(pc)) return false;
    const auto *rip = reinterpret_cast<const unsigned char *>(pc);
    return rip[-2] == 0x0f && rip[-1] == 0x05;
#else
    (void)ucontext;
    return false;
#endif
}

ScopedHandler::ScopedHandler(int sig, void (*handler)(int, siginfo_t *, void *), bool restart)
    : sig_(sig) {
    struct sigaction sa {};
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | (restart ? SA_RESTART : 0);
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, &old_);
}

ScopedHandler::~ScopedHandler() {
    sigaction(sig_, &old_, nullptr);
}

Call::Call(std::function<VIP_RETURN()> fn) {
    thread_ = std::thread([this, fn] {
        tid_ = tid();
        double t0 = now_ms();
        rc_ = fn();
        ms_ = now_ms() - t0;
        done_ = true;
    });
}

Call::~Call() {
    if (thread_.joinable()) thread_.join();
}

pid_t Call::thread_id() {
    while (!tid_) sleep_ms(0.1);
    return tid_;
}

void Call::signal(int sig) {
    pthread_kill(thread_.native_handle(), sig);
}

bool Call::finished(int timeout_ms) {
    double end = now_ms() + timeout_ms;
    while (!done_ && now_ms() < end) sleep_ms(0.5);
    return done_;
}

VIP_RETURN Call::join() {
    if (thread_.joinable()) thread_.join();
    return rc_;
}

std::vector<Disposition> dispositions() {
    std::vector<Disposition> out;
    for (int sig = 1; sig <= SIGRTMAX; ++sig) {
        struct sigaction sa {};
        // Signals glibc keeps for itself (32, 33) are refused: nothing to compare.
        if (sigaction(sig, nullptr, &sa) != 0) continue;
        Disposition d{};
        d.sig = sig;
        d.handler = (sa.sa_flags & SA_SIGINFO) ? reinterpret_cast<void *>(sa.sa_sigaction)
                                               : reinterpret_cast<void *>(sa.sa_handler);
        d.flags = sa.sa_flags;
        d.mask = sa.sa_mask;
        out.push_back(d);
    }
    return out;
}

std::vector<std::string> compare(const std::vector<Disposition> &before,
                                 const std::vector<Disposition> &after) {
    std::vector<std::string> out;
    if (before.size() != after.size())
        out.push_back(fmt("%zu signals before, %zu after", before.size(), after.size()));
    for (size_t i = 0; i < before.size() && i < after.size(); ++i) {
        const Disposition &a = before[i], &b = after[i];
        bool same_mask = true;
        for (int s = 1; s <= SIGRTMAX; ++s)
            if (sigismember(&a.mask, s) != sigismember(&b.mask, s)) same_mask = false;
        if (a.sig != b.sig || a.handler != b.handler || a.flags != b.flags || !same_mask)
            out.push_back(fmt("signal %d (%s): handler %p flags 0x%x -> handler %p flags 0x%x%s",
                              a.sig, strsignal(a.sig), a.handler, a.flags, b.handler, b.flags,
                              same_mask ? "" : ", sa_mask changed"));
    }
    return out;
}

std::string status_field(pid_t thread, const char *field) {
    std::string path = thread ? fmt("/proc/self/task/%d/status", thread) : "/proc/self/status";
    std::ifstream in(path);
    std::string line, key = std::string(field) + ":";
    while (std::getline(in, line))
        if (line.compare(0, key.size(), key) == 0) {
            size_t p = key.size();
            while (p < line.size() && (line[p] == ' ' || line[p] == '\t')) ++p;
            return line.substr(p);
        }
    return "";
}

uint64_t kernel_mask(pid_t thread) {
    return strtoull(status_field(thread, "SigBlk").c_str(), nullptr, 16);
}

uint64_t own_mask() {
    sigset_t s;
    pthread_sigmask(SIG_BLOCK, nullptr, &s);
    uint64_t m = 0;
    for (int sig = 1; sig <= 64 && sig <= SIGRTMAX; ++sig)
        if (sigismember(&s, sig) == 1) m |= 1ull << (sig - 1);
    return m;
}

std::string mask_text(uint64_t m) {
    return fmt("%016llx", static_cast<unsigned long long>(m));
}

namespace {
constexpr uint32_t kMagic = 0x7e57ab1e;
uint32_t seed_of(uint32_t sender, uint32_t seq, uint32_t len) {
    return sender * 1000003u + seq * 7919u + len;
}
} // namespace

void fill_msg(uint8_t *p, uint32_t len, uint32_t sender, uint32_t seq) {
    uint32_t h[4] = {kMagic, sender, seq, len};
    memcpy(p, h, sizeof h);
    vt::fill_pattern(p + kMsgHeader, len - kMsgHeader, seed_of(sender, seq, len));
}

bool check_msg(const uint8_t *p, uint32_t len, uint32_t *sender, uint32_t *seq) {
    if (len < kMsgHeader) return false;
    uint32_t h[4];
    memcpy(h, p, sizeof h);
    if (h[0] != kMagic || h[3] != len) return false;
    *sender = h[1];
    *seq = h[2];
    return vt::check_pattern(p + kMsgHeader, len - kMsgHeader, seed_of(h[1], h[2], len));
}

std::vector<pid_t> threads_named(const char *name) {
    std::vector<pid_t> out;
    DIR *d = opendir("/proc/self/task");
    while (dirent *e = d ? readdir(d) : nullptr) {
        if (e->d_name[0] == '.') continue;
        std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/comm");
        std::string comm;
        std::getline(in, comm);
        if (comm == name) out.push_back(atoi(e->d_name));
    }
    if (d) closedir(d);
    return out;
}

} // namespace vt
