#include "core/host_load.h"

#include "core/clock.h"
#include "core/config.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace vipl {

int host_runnable_tasks() {
    // Raw system calls: an interposer above the library (db-interconnect's) sees
    // neither the open nor the close, and errno stays the caller's.
    int saved = errno;
    int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/proc/loadavg", O_RDONLY | O_CLOEXEC));
    char buf[128];
    ssize_t n = -1;
    if (fd >= 0) {
        n = syscall(SYS_read, fd, buf, sizeof buf - 1);
        syscall(SYS_close, fd);
    }
    errno = saved;
    if (n <= 0) return -1;
    buf[n] = '\0';
    // "0.52 0.58 0.59 3/612 12345": the fourth field's numerator runs now.
    const char *p = buf;
    for (int field = 0; field < 3; ++field) {
        while (*p && *p != ' ') ++p;
        while (*p == ' ') ++p;
    }
    char *end = nullptr;
    long running = strtol(p, &end, 10);
    if (end == p || *end != '/') return -1;
    return static_cast<int>(running);
}

bool host_has_idle_cpu() {
    if (config().spin_on_busy_host) return true;
    static std::atomic<uint64_t> s_next{0};
    static std::atomic<bool> s_idle{true};
    static const long s_cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t now = coarse_ns();
    if (now >= s_next.load(std::memory_order_relaxed)) {
        // Two threads may both read: harmless, the later answer stays.
        s_next.store(now + 1000000, std::memory_order_relaxed);
        int running = host_runnable_tasks();
        s_idle.store(running < 0 || s_cpus <= 0 || running <= s_cpus, std::memory_order_relaxed);
    }
    return s_idle.load(std::memory_order_relaxed);
}

} // namespace vipl
