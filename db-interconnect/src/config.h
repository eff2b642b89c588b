// The interposer's configuration: one declared table of VIPL_DB_* keys, read once from
// the environment when the library is first used, printed by `vipl-run --config`.
//
// A bad value or an unknown VIPL_DB_* variable is never ignored silently: the key keeps
// its default, the problem is logged once on standard error when the library loads, and
// `vipl-run` refuses to start the program (config_problems() lists them).
//
// Thread rules: config() is immutable once made (the first call makes it; call it from
// ordinary code before any signal handler needs it).  Not async-signal-safe on first use.
#pragma once

#include "rules.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace vipl::db {

struct Config {
    bool enable = true;
    Rules listen;  // listeners whose connections may ride vipl
    Rules connect; // same-host destinations a client tries (those with a marker)
    Rules remote;  // destinations on other hosts that run the interconnect (tcp provider)
    uint32_t spin_us = 20;
    uint32_t buffer_size = 32 * 1024;
    uint32_t recv_buffers = 16;
    uint32_t send_buffers = 16;
    bool inline_sends = true;
    bool one_cpu = false; // ride vipl even when both ends share one CPU only (placement.h)
    uint32_t linger_ms = 5000;
    uint32_t negotiate_ms = 2000;
    uint32_t log = 0; // 0 errors, 1 + fallbacks and warnings, 2 + every connection
};

struct ConfigKey {
    const char *name; // "DB_SPIN_US": environment variable VIPL_DB_SPIN_US
    const char *type; // "u32", "bool" or "rules"
    const char *default_value;
    uint64_t min, max; // u32 range
    const char *help;
};

std::span<const ConfigKey> config_table() noexcept;

// The configuration in effect (made on first call).
const Config &config() noexcept;

// What was wrong in the environment, one sentence each (empty: nothing).
const std::vector<std::string> &config_problems() noexcept;

// The value in effect of a key, as text.
std::string config_value(const char *name);

} // namespace vipl::db
