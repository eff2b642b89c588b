#include "placement.h"

#include "config.h"
#include "hello.h"
#include "real.h"

#include <atomic>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

namespace vipl::db {

namespace {

constexpr uint32_t kFnvBasis = 2166136261u;

uint32_t fnv(uint32_t h, const char *p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 16777619u;
    return h;
}

// A small file of /proc into buf (NUL-terminated); its length, or -1.
ssize_t slurp(const char *path, char *buf, size_t size) {
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = real().read(fd, buf, size - 1);
    real().close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return n;
}

// Whether a /proc/self/cgroup line names the group the cpu controller schedules by:
// cgroup v1's "N:cpu,cpuacct:/path" (cpu among its controllers), v2's "0::/path".
bool cpu_line(const char *line, const char *end) {
    const char *c = static_cast<const char *>(std::memchr(line, ':', end - line));
    if (!c) return false;
    const char *list = c + 1;
    const char *e = static_cast<const char *>(std::memchr(list, ':', end - list));
    if (!e) return false;
    if (e == list) return line[0] == '0' && c == line + 1;
    for (const char *t = list; t < e;) {
        const char *comma = static_cast<const char *>(std::memchr(t, ',', e - t));
        const char *te = comma ? comma : e;
        if (te - t == 3 && std::memcmp(t, "cpu", 3) == 0) return true;
        t = te + 1;
    }
    return false;
}

uint32_t compute_group() {
    char buf[4096];
    uint32_t h = kFnvBasis;
    bool known = false;
    // The cpu controller's group, v1 before v2 (a hybrid host lists both; v1's schedules).
    ssize_t n = slurp("/proc/self/cgroup", buf, sizeof buf);
    const char *v2 = nullptr, *v2e = nullptr;
    for (const char *l = buf; n > 0 && *l;) {
        const char *e = std::strchr(l, '\n');
        if (!e) e = l + std::strlen(l);
        if (cpu_line(l, e)) {
            if (l[0] == '0' && l[1] == ':' && l[2] == ':') {
                v2 = l;
                v2e = e;
            } else {
                h = fnv(h, l, e - l);
                known = true;
                v2 = nullptr;
                break;
            }
        }
        l = *e ? e + 1 : e;
    }
    if (v2) {
        h = fnv(h, v2, v2e - v2);
        known = true;
    }
    // The session's autogroup, when the scheduler uses them ("/autogroup-N nice K").
    char on[8];
    if (slurp("/proc/sys/kernel/sched_autogroup_enabled", on, sizeof on) > 0 && on[0] == '1') {
        ssize_t m = slurp("/proc/self/autogroup", buf, sizeof buf);
        if (m <= 0) return 0;
        const char *sp = std::strchr(buf, ' ');
        h = fnv(h, buf, sp ? static_cast<size_t>(sp - buf) : static_cast<size_t>(m));
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
    t = fnv(kFnvBasis, buf, std::strlen(buf));
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
