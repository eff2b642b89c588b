// Library configuration: tables of keys (name, default, range, help) over the fields of
// one struct each, read once from VIPL_<NAME>.  The core declares its keys here
// (config.cc); each provider declares its own, named with its prefix (SHM_, TCP_), in
// its folder and hands the table out in its ProviderOps row, as UCX's transports do.
// VipConfigCount/VipConfigInfo list the core's keys, then each provider's in registry
// order.  A row may name the key it was called before (an alias, read when the new name
// is not set: old environments keep working for one release; the README lists them).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace vipl {

struct ConfigKey {
    const char *name;
    const char *default_value;
    const char *help;
};

enum class ConfigType { level, u32, u64, boolean };

struct ConfigRow {
    ConfigKey key;
    ConfigType type;
    size_t offset; // of the field in the table's struct
    uint64_t min, max;
    const char *alias; // the key's former name, or null
};

// A row of struct S's field: VIPL_CONFIG_ROW(S, "NAME", "default", u32, field, min, max,
// "help"), or VIPL_CONFIG_ALIAS(..., "OLD_NAME") for a renamed key.
#define VIPL_CONFIG_ALIAS(S, name, def, type, field, lo, hi, help, old)                            \
    ::vipl::ConfigRow {                                                                            \
        {name, def, help}, ::vipl::ConfigType::type, offsetof(S, field), lo, hi, old               \
    }
#define VIPL_CONFIG_ROW(S, name, def, type, field, lo, hi, help)                                   \
    VIPL_CONFIG_ALIAS(S, name, def, type, field, lo, hi, help, nullptr)

// One table: its rows, the struct they fill, loaded at the first use (thread safe).
class ConfigTable {
public:
    // Called after the rows are read: checks what no single row can (a power of two, a
    // sum of two keys), fixes the values and adds a sentence per problem to `bad`.
    using Check = void (*)(void *values, std::vector<std::string> &bad);

    ConfigTable(const ConfigRow *rows, size_t count, void *values, Check check) noexcept
        : rows_(rows), count_(count), values_(values), check_(check) {}
    ConfigTable(const ConfigTable &) = delete;

    size_t count() const noexcept { return count_; }
    const ConfigKey &key(size_t i) const noexcept { return rows_[i].key; }
    // The value in effect for key i, as text.
    const char *value_text(size_t i) {
        load();
        return texts_[i].c_str();
    }

protected:
    void load() {
        // std::call_once costs thread-local bookkeeping on every call: once loaded, the
        // flag alone is read.
        if (loaded_.load(std::memory_order_acquire)) return;
        std::call_once(once_, [this] { load_now(); });
        loaded_.store(true, std::memory_order_release);
    }

private:
    void load_now();

    const ConfigRow *rows_;
    size_t count_;
    void *values_;
    Check check_;
    std::vector<std::string> texts_;
    std::once_flag once_;
    std::atomic<bool> loaded_{false};
};

// The table of struct T's values.
template <class T>
class ConfigOf : public ConfigTable {
public:
    template <size_t N>
    explicit ConfigOf(const ConfigRow (&rows)[N], Check check = nullptr) noexcept
        : ConfigTable(rows, N, &values_, check) {}
    const T &get() {
        load();
        return values_;
    }

private:
    T values_{};
};

// The core's keys.
struct Config {
    int log_level;               // LOG_LEVEL
    uint32_t spin_us;            // SPIN_US
    uint32_t spin_contended;     // SPIN_CONTENDED
    uint64_t max_transfer;       // MAX_TRANSFER
    uint32_t max_segments;       // MAX_SEGMENTS
    uint32_t max_queue;          // MAX_QUEUE
    uint32_t max_vi;             // MAX_VI
    uint32_t max_cq;             // MAX_CQ
    uint32_t max_cq_entries;     // MAX_CQ_ENTRIES
    uint32_t max_regions;        // MAX_REGIONS
    uint64_t max_register_bytes; // MAX_REGISTER_BYTES
    uint32_t max_ptags;          // MAX_PTAGS
    uint32_t connect_ack_ms;     // CONNECT_ACK_MS
    uint32_t shared_arena_mb;    // SHARED_ARENA_MB
};

// The core's configuration of this process; read on first use, thread safe.
const Config &config();
ConfigTable &core_config_table();

} // namespace vipl
