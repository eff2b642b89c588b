#include "core/config.h"

#include "core/log.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace vipl {
namespace {

#define ROW(name, def, type, field, lo, hi, help)                                                  \
    VIPL_CONFIG_ROW(Config, name, def, type, field, lo, hi, help)

// The core's keys: the providers declare theirs (prov/*/..._config.cc).
const ConfigRow kRows[] = {
    ROW("LOG_LEVEL", "warn", level, log_level, 0, 3, "error, warn, info or debug"),
    ROW("SPIN_US", "20", u32, spin_us, 0, 1000000,
        "microseconds a blocking call spins before it sleeps (0: sleep at once); no spinning "
        "when the peer runs on the same CPU"),
    ROW("SPIN_CONTENDED", "1", u32, spin_contended, 0, 1,
        "1: while other tasks wait for its CPU, a waiter spins no longer for a peer at work "
        "(its run delay, /proc/thread-self/schedstat); 0: as if the CPU were free"),
    ROW("MAX_TRANSFER", "67108864", u64, max_transfer, 4096, 1ull << 40,
        "largest descriptor in bytes (NIC MaxTransferSize)"),
    ROW("MAX_SEGMENTS", "64", u32, max_segments, 2, 252, "segments per descriptor"),
    ROW("MAX_QUEUE", "4096", u32, max_queue, 1, 1u << 20, "outstanding descriptors per work queue"),
    ROW("MAX_VI", "1048576", u32, max_vi, 1, 1u << 24, "VIs per process"),
    ROW("MAX_CQ", "65536", u32, max_cq, 1, 1u << 24, "completion queues per process"),
    ROW("MAX_CQ_ENTRIES", "1048576", u32, max_cq_entries, 1, 1u << 26, "entries per CQ"),
    ROW("MAX_REGIONS", "65536", u32, max_regions, 16, 1u << 20,
        "registered memory regions per NIC"),
    ROW("MAX_REGISTER_BYTES", "70368744177664", u64, max_register_bytes, 4096, 1ull << 47,
        "bytes registered per NIC"),
    ROW("MAX_PTAGS", "4096", u32, max_ptags, 1, 1u << 20, "protection tags per NIC"),
    ROW("CONNECT_ACK_MS", "5000", u32, connect_ack_ms, 10, 600000,
        "how long an accepting server waits for the client to finish the handshake"),
    ROW("SHARED_ARENA_MB", "16384", u32, shared_arena_mb, 16, 1u << 20,
        "address space reserved (not committed) for shareable objects, shared with fork children"),
};
#undef ROW

bool parse_number(const char *text, uint64_t *v) {
    int saved = errno;
    errno = 0;
    char *end = nullptr;
    unsigned long long n = strtoull(text, &end, 0);
    bool ok = !errno && end != text && !*end;
    errno = saved;
    *v = n;
    return ok;
}

// The value of a numeric row's field; false for other rows.
bool number_of(const ConfigRow &row, const void *values, uint64_t *v) {
    const char *base = static_cast<const char *>(values) + row.offset;
    if (row.type == ConfigType::u32)
        *v = *reinterpret_cast<const uint32_t *>(base);
    else if (row.type == ConfigType::u64)
        *v = *reinterpret_cast<const uint64_t *>(base);
    else
        return false;
    return true;
}

bool parse_one(const ConfigRow &row, const char *text, void *values) {
    char *base = static_cast<char *>(values) + row.offset;
    switch (row.type) {
    case ConfigType::level: {
        static const char *const names[] = {"error", "warn", "info", "debug"};
        for (int i = 0; i < 4; ++i)
            if (strcmp(text, names[i]) == 0) {
                *reinterpret_cast<int *>(base) = i;
                return true;
            }
        return false;
    }
    case ConfigType::boolean:
        if (!strcmp(text, "1") || !strcmp(text, "yes") || !strcmp(text, "on") ||
            !strcmp(text, "true")) {
            *reinterpret_cast<bool *>(base) = true;
            return true;
        }
        if (!strcmp(text, "0") || !strcmp(text, "no") || !strcmp(text, "off") ||
            !strcmp(text, "false")) {
            *reinterpret_cast<bool *>(base) = false;
            return true;
        }
        return false;
    case ConfigType::u32:
    case ConfigType::u64: {
        uint64_t v;
        if (!parse_number(text, &v) || v < row.min || v > row.max) return false;
        if (row.type == ConfigType::u32)
            *reinterpret_cast<uint32_t *>(base) = static_cast<uint32_t>(v);
        else
            *reinterpret_cast<uint64_t *>(base) = v;
        return true;
    }
    }
    return false;
}

} // namespace

ConfigTable &core_config_table() {
    static ConfigOf<Config> table(kRows);
    return table;
}

const Config &config() {
    return static_cast<ConfigOf<Config> &>(core_config_table()).get();
}

void ConfigTable::load_now() {
    std::vector<std::string> bad, renamed;
    texts_.assign(count_, {});
    for (size_t i = 0; i < count_; ++i) {
        const ConfigRow &row = rows_[i];
        parse_one(row, row.key.default_value, values_);
        texts_[i] = row.key.default_value;
        std::string env = std::string("VIPL_") + row.key.name;
        const char *text = getenv(env.c_str());
        if ((!text || !*text) && row.alias) {
            env = std::string("VIPL_") + row.alias;
            text = getenv(env.c_str());
            if (text && *text) renamed.push_back(env + " (now VIPL_" + row.key.name + ")");
        }
        if (!text || !*text) continue;
        if (parse_one(row, text, values_))
            texts_[i] = text;
        else
            bad.push_back(env + "=" + text);
    }
    if (check_) {
        check_(values_, bad);
        // A number the check fixed shows as the value in effect.
        for (size_t i = 0; i < count_; ++i) {
            uint64_t v;
            if (!number_of(rows_[i], values_, &v)) continue;
            uint64_t was = 0;
            std::string text = texts_[i];
            if (!parse_number(text.c_str(), &was) || was != v) texts_[i] = std::to_string(v);
        }
    }
    // The core's table logs by its own level: config() would wait for this very load.
    int level = this == &core_config_table() ? static_cast<const Config *>(values_)->log_level
                                             : config().log_level;
    if (level >= static_cast<int>(LogLevel::warn))
        for (auto &b : bad)
            log_line(LogLevel::warn, "ignoring invalid configuration %s", b.c_str());
    if (level >= static_cast<int>(LogLevel::info))
        for (auto &r : renamed)
            log_line(LogLevel::info, "configuration read from the old name %s", r.c_str());
}

} // namespace vipl
