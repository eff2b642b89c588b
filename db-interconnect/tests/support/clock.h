// The one clock of the db test harnesses (sockdiff, the PostgreSQL suite): CLOCK_MONOTONIC,
// the same in every process of a run, and a sleep that a signal does not cut short.
//
// Thread rules: thread-safe.  Async-signal-safe.
#pragma once

#include <cstdint>

namespace vipl::db::test {

// CLOCK_MONOTONIC in ns.
uint64_t now_ns();
// Sleeps ms milliseconds (resumed after a signal handler ran).
void sleep_ms(int ms);

} // namespace vipl::db::test
