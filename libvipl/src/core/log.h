// Logging: one line per event to stderr, prefixed "vipl: ", filtered by VIPL_LOG_LEVEL.
#pragma once

#include "vipl_ext.h"

namespace vipl {

// The public VIP_LOG_* levels, which VipLogHandler reports.
enum class LogLevel {
    error = VIP_LOG_ERROR,
    warn = VIP_LOG_WARNING,
    info = VIP_LOG_INFO,
    debug = VIP_LOG_DEBUG
};

bool log_enabled(LogLevel level);
void log_line(LogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The program's watcher of log lines (VipLogHandler); null: none.
void log_watch(VIP_LOG_HANDLER handler, void *context);

} // namespace vipl

#define VIPL_LOG(level, ...)                                                                       \
    do {                                                                                           \
        if (::vipl::log_enabled(::vipl::LogLevel::level))                                          \
            ::vipl::log_line(::vipl::LogLevel::level, __VA_ARGS__);                                \
    } while (0)
#define VIPL_ERROR(...) VIPL_LOG(error, __VA_ARGS__)
#define VIPL_WARN(...) VIPL_LOG(warn, __VA_ARGS__)
#define VIPL_INFO(...) VIPL_LOG(info, __VA_ARGS__)
#define VIPL_DEBUG(...) VIPL_LOG(debug, __VA_ARGS__)
