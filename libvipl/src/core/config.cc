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

enum class Type { level, u32, u64, boolean };

struct Row {
    ConfigKey key;
    Type type;
    size_t offset;
    uint64_t min;
    uint64_t max;
};

#define ROW(name, def, type, field, lo, hi, help)                                                  \
    Row {                                                                                          \
        {name, def, help}, Type::type, offsetof(Config, field), lo, hi                             \
    }

// The one place where configuration is declared.
const Row kRows[] = {
    ROW("LOG_LEVEL", "warn", level, log_level, 0, 3, "error, warn, info or debug"),
    ROW("SPIN_US", "20", u32, spin_us, 0, 1000000,
        "microseconds a blocking call spins before it sleeps (0: sleep at once); no spinning "
        "when the peer runs on the same CPU"),
    ROW("SPIN_CONTENDED", "1", u32, spin_contended, 0, 1,
        "1: while other tasks wait for its CPU, a waiter spins no longer for a peer at work "
        "(its run delay, /proc/thread-self/schedstat); 0: as if the CPU were free"),
    ROW("COPY_THRESHOLD", "512", u32, copy_threshold, 0, 65536,
        "sends of at most this many bytes use COPY-SEND-COPY through the ring, larger ones "
        "SEND-GET (single copy by the receiver)"),
    ROW("GET_ALIGN", "1", u32, get_align, 1, 4096,
        "SEND-GET only when every buffer address is a multiple of this (8 mimics the paper's "
        "hardware); other sends use the copy path"),
    ROW("SHM_RING_SIZE", "8192", u32, shm_ring_size, 2048, 1u << 24,
        "bytes of each direction's ring in a shm connection (power of two)"),
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
    ROW("LIVENESS_MS", "10", u32, liveness_ms, 1, 60000,
        "calls that do not sleep check that the peer is alive this often"),
    ROW("CONNECT_ACK_MS", "5000", u32, connect_ack_ms, 10, 600000,
        "how long an accepting server waits for the client to finish the handshake"),
    ROW("FORCE_DOORBELL", "0", boolean, force_doorbell, 0, 1,
        "ring the peer's doorbell on every post even when it is awake (for measurements)"),
    ROW("CMA", "1", boolean, cma, 0, 1,
        "use cross-memory attach (process_vm_readv/writev); 0 forces the pipelined copy"),
    ROW("SHARED_ARENA_MB", "16384", u32, shared_arena_mb, 16, 1u << 20,
        "address space reserved (not committed) for shareable objects, shared with fork children"),
    ROW("TCP_PORT_BASE", "20000", u32, tcp_port_base, 1, 65535,
        "tcp provider: first TCP port discriminators hash to (two-byte discriminators name "
        "their port directly)"),
    ROW("TCP_PORT_RANGE", "12000", u32, tcp_port_range, 1, 65535,
        "tcp provider: how many ports from TCP_PORT_BASE discriminators hash to"),
    ROW("TCP_DEAD_MS", "1500", u32, tcp_dead_ms, 100, 3600000,
        "tcp provider: a silent link is declared dead after about this long (keepalive and "
        "unacknowledged data), plus at most one second of probe interval"),
    ROW("TCP_FRAME_WAIT_US", "2000", u32, tcp_frame_wait_us, 0, 1000000,
        "tcp provider: a call that finds a message partly arrived waits this long at most "
        "for the rest (it is on the wire), rather than return empty-handed after a wake-up"),
    ROW("TCP_ACK_THRESHOLD", "65536", u32, tcp_ack_threshold, 0, 1u << 30,
        "tcp provider, reliable delivery: a send larger than this completes when the target "
        "has placed it (its acknowledgement costs little next to the transfer); a smaller one "
        "as soon as the socket has it"),
    ROW("TCP_WINDOW", "4194304", u32, tcp_window, 65536, 1u << 30,
        "tcp provider: bytes a connection's receiver takes in ahead of its program (its socket "
        "buffer is sized for it, within the system's limits); senders wait for more"),
};
#undef ROW

constexpr size_t kCount = sizeof kRows / sizeof kRows[0];

Config g_config;
std::vector<std::string> g_text(kCount);
std::once_flag g_once;

bool parse_one(const Row &row, const char *text, Config &cfg) {
    char *base = reinterpret_cast<char *>(&cfg) + row.offset;
    switch (row.type) {
    case Type::level: {
        static const char *const names[] = {"error", "warn", "info", "debug"};
        for (int i = 0; i < 4; ++i)
            if (strcmp(text, names[i]) == 0) {
                *reinterpret_cast<int *>(base) = i;
                return true;
            }
        return false;
    }
    case Type::boolean:
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
    case Type::u32:
    case Type::u64: {
        errno = 0;
        char *end = nullptr;
        unsigned long long v = strtoull(text, &end, 0);
        if (errno || end == text || *end || v < row.min || v > row.max) return false;
        if (row.type == Type::u32)
            *reinterpret_cast<uint32_t *>(base) = static_cast<uint32_t>(v);
        else
            *reinterpret_cast<uint64_t *>(base) = v;
        return true;
    }
    }
    return false;
}

void load() {
    Config cfg{};
    std::vector<std::string> bad;
    for (size_t i = 0; i < kCount; ++i) {
        const Row &row = kRows[i];
        parse_one(row, row.key.default_value, cfg);
        std::string env = std::string("VIPL_") + row.key.name;
        const char *text = getenv(env.c_str());
        g_text[i] = row.key.default_value;
        if (text && *text) {
            if (parse_one(row, text, cfg))
                g_text[i] = text;
            else
                bad.push_back(env + "=" + text);
        }
    }
    uint32_t &ring = cfg.shm_ring_size;
    if (ring & (ring - 1)) {
        bad.push_back("VIPL_SHM_RING_SIZE (not a power of two)");
        ring = 8192;
    }
    if (cfg.tcp_port_base + cfg.tcp_port_range > 65536) {
        bad.push_back("VIPL_TCP_PORT_RANGE (runs past port 65535)");
        cfg.tcp_port_range = 65536 - cfg.tcp_port_base;
    }
    g_config = cfg;
    // Not VIPL_WARN: it would re-enter config() while call_once is still running.
    if (cfg.log_level >= static_cast<int>(LogLevel::warn))
        for (auto &b : bad)
            log_line(LogLevel::warn, "ignoring invalid configuration %s", b.c_str());
}

} // namespace

const Config &config() {
    // std::call_once costs thread-local bookkeeping on every call; once
    // loaded, the flag alone is read.
    static std::atomic<bool> loaded{false};
    if (!loaded.load(std::memory_order_acquire)) {
        std::call_once(g_once, load);
        loaded.store(true, std::memory_order_release);
    }
    return g_config;
}

size_t config_key_count() {
    return kCount;
}
const ConfigKey &config_key(size_t index) {
    return kRows[index].key;
}
const char *config_value_text(size_t index) {
    config();
    return g_text[index].c_str();
}

} // namespace vipl
