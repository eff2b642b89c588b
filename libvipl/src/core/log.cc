#include "core/log.h"

#include "core/config.h"

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace vipl {

namespace {
// The context is stored before the handler that reads it is published.
std::atomic<VIP_LOG_HANDLER> g_watch{nullptr};
std::atomic<void *> g_watch_context{nullptr};
} // namespace

void log_watch(VIP_LOG_HANDLER handler, void *context) {
    g_watch.store(nullptr, std::memory_order_release);
    g_watch_context.store(context, std::memory_order_relaxed);
    g_watch.store(handler, std::memory_order_release);
}

bool log_enabled(LogLevel level) {
    return static_cast<int>(level) <= config().log_level;
}

void log_line(LogLevel level, const char *fmt, ...) {
    static const char *const names[] = {"error", "warning", "info", "debug"};
    int saved_errno = errno;
    char buf[512];
    int n = snprintf(buf, sizeof buf, "vipl[%d]: %s: ", static_cast<int>(getpid()),
                     names[static_cast<int>(level)]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
    va_end(ap);
    size_t len =
        n + (m < 0 ? 0 : (static_cast<size_t>(m) < sizeof buf - n - 1 ? m : sizeof buf - n - 2));
    buf[len++] = '\n';
    // One write() so lines of concurrent processes do not interleave.
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
    if (VIP_LOG_HANDLER watch = g_watch.load(std::memory_order_acquire)) {
        buf[len - 1] = '\0';
        watch(g_watch_context.load(std::memory_order_relaxed), static_cast<VIP_ULONG>(level),
              buf + n);
    }
    errno = saved_errno;
}

} // namespace vipl
