// Logging to standard error through the real write(), one line per call, prefixed
// "libvipl-db[<pid>]: ".  Level 0 errors, 1 fallbacks and warnings, 2 every connection
// (VIPL_DB_LOG).  Not async-signal-safe (formats with vsnprintf).
#pragma once

namespace vipl::db {

void log_at(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define VIPL_DB_ERROR(...) ::vipl::db::log_at(0, __VA_ARGS__)
#define VIPL_DB_WARN(...) ::vipl::db::log_at(1, __VA_ARGS__)
#define VIPL_DB_INFO(...) ::vipl::db::log_at(2, __VA_ARGS__)

} // namespace vipl::db
