#include "placement.h"

#include "config.h"
#include "hello.h"
#include "real.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <string_view>
#include <unistd.h>

namespace vipl::db {

namespace {

// A small file of /proc into buf (NUL-terminated); its length, or -1.
ssize_t slurp(const char *path, char *buf, size_t size) {
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = real().read(fd, buf, size - 1);
    real().close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return n;
}

// How a /proc/self/cgroup line names the group the cpu controller schedules by: 2 for
// cgroup v1's "N:cpu,cpuacct:/path" (cpu among its controllers), 1 for v2's "0::/path",
// 0 for neither.  A hybrid host lists both; v1's schedules.
int cpu_rank(std::string_view line) {
    size_t a = line.find(':');
    size_t b = a == line.npos ? a : line.find(':', a + 1);
    if (b == line.npos) return 0;
    std::string_view list = line.substr(a + 1, b - a - 1);
    if (list.empty()) return line.substr(0, a) == "0" ? 1 : 0;
    while (!list.empty()) {
        size_t c = list.find(',');
        if (list.substr(0, c) == "cpu") return 2;
        list = c == list.npos ? std::string_view() : list.substr(c + 1);
    }
    return 0;
}

uint32_t compute_group() {
    char buf[4096];
    uint32_t h = kFnvBasis;
    bool known = false;
    std::string_view lines(buf, std::max<ssize_t>(slurp("/proc/self/cgroup", buf, sizeof buf), 0));
    std::string_view best;
    int rank = 0;
    while (!lines.empty()) {
        size_t e = lines.find('\n');
        std::string_view line = lines.substr(0, e);
        lines = e == lines.npos ? std::string_view() : lines.substr(e + 1);
        if (int r = cpu_rank(line); r > rank) {
            rank = r;
            best = line;
        }
    }
    if (rank) {
        h = fnv1a(best.data(), best.size(), h);
        known = true;
    }
    // The session's autogroup, when the scheduler uses them ("/autogroup-N nice K").
    char on[8];
    if (slurp("/proc/sys/kernel/sched_autogroup_enabled", on, sizeof on) > 0 && on[0] == '1') {
        ssize_t m = slurp("/proc/self/autogroup", buf, sizeof buf);
        if (m <= 0) return 0;
        const char *sp = std::strchr(buf, ' ');
        h = fnv1a(buf, sp ? static_cast<size_t>(sp - buf) : static_cast<size_t>(m), h);
        known = true;
    }
    if (!known) return 0;
    return h ? h : 1;
}

// Cached per process: a fork child looks again (setsid between fork and a connection
// moves it to a new autogroup; exec starts a new image anyway).
struct GroupCache {
    std::atomic<pid_t> pid{0};
    std::atomic<uint32_t> tag{0};
};
GroupCache g_group;
std::atomic<uint32_t> g_host{0};

} // namespace

uint32_t sole_cpu() noexcept {
    cpu_set_t set;
    CPU_ZERO(&set);
    // A machine with more CPUs than a cpu_set_t holds fails here: several, then.
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1) return 0;
    for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) return static_cast<uint32_t>(c) + 1;
    return 0;
}

uint32_t host_tag() noexcept {
    uint32_t t = g_host.load(std::memory_order_relaxed);
    if (t) return t;
    // 36 characters, new at every boot, the same in every namespace of the kernel.
    char buf[64];
    if (slurp("/proc/sys/kernel/random/boot_id", buf, sizeof buf) < 16) return 0;
    t = fnv1a(buf, std::strlen(buf));
    t = t ? t : 1;
    g_host.store(t, std::memory_order_relaxed);
    return t;
}

uint32_t group_tag() noexcept {
    pid_t me = getpid();
    if (g_group.pid.load(std::memory_order_acquire) == me)
        return g_group.tag.load(std::memory_order_relaxed);
    uint32_t t = compute_group();
    g_group.tag.store(t, std::memory_order_relaxed);
    g_group.pid.store(me, std::memory_order_release);
    return t;
}

void placement_say(Hello *h) noexcept {
    h->cpu = h->host = h->group = 0;
    if (config().one_cpu) return;
    h->host = host_tag();
    if (!h->host) return;
    h->cpu = sole_cpu();
    if (h->cpu) h->group = group_tag();
}

bool placement_kernel(const Hello &h) noexcept {
    if (config().one_cpu || !h.cpu || !h.host || h.host != host_tag()) return false;
    if (sole_cpu() != h.cpu) return false;
    // One CPU: a hand-off by sched_yield runs the peer only within one group.
    uint32_t g = group_tag();
    return !(g && h.group == g);
}

} // namespace vipl::db
