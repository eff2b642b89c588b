#include "log.h"

#include "config.h"
#include "real.h"

#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>

namespace vipl::db {

void log_at(int level, const char *fmt, ...) {
    if (level > static_cast<int>(config().log)) return;
    int saved = errno;
    char buf[512];
    int n = std::snprintf(buf, sizeof buf, "libvipl-db[%d]: ", static_cast<int>(getpid()));
    va_list ap;
    va_start(ap, fmt);
    int m = std::vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) m = 0;
    size_t len =
        static_cast<size_t>(n) + std::min<size_t>(static_cast<size_t>(m), sizeof buf - n - 2);
    buf[len++] = '\n';
    ssize_t r = real().write(2, buf, len);
    (void)r;
    errno = saved;
}

} // namespace vipl::db
