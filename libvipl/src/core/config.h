// Library configuration: one table of keys (name, default, help), read once from VIPL_<NAME>.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vipl {

struct Config {
    int log_level;               // LOG_LEVEL
    uint32_t spin_us;            // SPIN_US
    uint32_t spin_contended;     // SPIN_CONTENDED
    uint32_t copy_threshold;     // COPY_THRESHOLD
    uint32_t get_align;          // GET_ALIGN
    uint32_t shm_ring_size;      // SHM_RING_SIZE
    uint64_t max_transfer;       // MAX_TRANSFER
    uint32_t max_segments;       // MAX_SEGMENTS
    uint32_t max_queue;          // MAX_QUEUE
    uint32_t max_vi;             // MAX_VI
    uint32_t max_cq;             // MAX_CQ
    uint32_t max_cq_entries;     // MAX_CQ_ENTRIES
    uint32_t max_regions;        // MAX_REGIONS
    uint64_t max_register_bytes; // MAX_REGISTER_BYTES
    uint32_t max_ptags;          // MAX_PTAGS
    uint32_t liveness_ms;        // LIVENESS_MS
    uint32_t connect_ack_ms;     // CONNECT_ACK_MS
    bool force_doorbell;         // FORCE_DOORBELL
    bool cma;                    // CMA
    uint32_t shared_arena_mb;    // SHARED_ARENA_MB
    uint32_t tcp_port_base;      // TCP_PORT_BASE
    uint32_t tcp_port_range;     // TCP_PORT_RANGE
    uint32_t tcp_dead_ms;        // TCP_DEAD_MS
    uint32_t tcp_frame_wait_us;  // TCP_FRAME_WAIT_US
    uint32_t tcp_ack_threshold;  // TCP_ACK_THRESHOLD
    uint32_t tcp_window;         // TCP_WINDOW
};

// The configuration of this process; parsed on first use, thread safe.
const Config &config();

struct ConfigKey {
    const char *name;
    const char *default_value;
    const char *help;
};

size_t config_key_count();
const ConfigKey &config_key(size_t index);
// Value in effect for key index, as text.
const char *config_value_text(size_t index);

} // namespace vipl
