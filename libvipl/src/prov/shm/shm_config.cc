// The shm provider's configuration table: its keys, under the provider's prefix.
#include "prov/shm/shm_config.h"

namespace vipl::shm {
namespace {

#define ROW(name, def, type, field, lo, hi, help, old)                                             \
    VIPL_CONFIG_ALIAS(ShmConfig, name, def, type, field, lo, hi, help, old)

const ConfigRow kRows[] = {
    // Copy whatever fits half the ring (up to 64 KiB), not the paper's
    // 512 B: the receiver's process_vm_readv (a system call that pins the sender's pages)
    // costs more than two copies up to there, both placements (bench-vipl, AMD EPYC, 2
    // cores / 1 core: one-way 16 KiB 1.6 / 4.5 us copied against 3.7 / 6.2 by SEND-GET,
    // 32 KiB 2.9 / 6.0 against 5.3 / 7.5; 16 KiB streamed 1.45x / 1.4x faster).  Larger
    // sends stay SEND-GET: pieces through the ring beat it across cores (1 MiB 13.5
    // against 8.4 GB/s) but lose on one CPU (5.8 against 8.5), and make the sender's
    // later calls carry the message.
    ROW("SHM_COPY_THRESHOLD", "65536", u32, copy_threshold, 0, 65536,
        "sends of at most this many bytes use COPY-SEND-COPY through the ring when they fit "
        "half of it, larger ones SEND-GET (single copy by the receiver)",
        "COPY_THRESHOLD"),
    ROW("SHM_GET_ALIGN", "1", u32, get_align, 1, 4096,
        "SEND-GET only when every buffer address is a multiple of this (8 mimics the paper's "
        "hardware); other sends use the copy path",
        "GET_ALIGN"),
    // 512 KiB rings, as much as UCX's shared-memory FIFO holds (64 segments of 8 KiB): a
    // sender keeps as many copies in flight as the ring holds, and the further it runs
    // ahead, the colder (and cheaper to copy out) the lines its receiver reads.  4 KiB
    // messages streamed with 16 in flight went at 2.0 GB/s in 16 KiB rings (two copies,
    // then SEND-GETs), 3.8-5.7 in 64 KiB; with 64 in flight (bench-vipl, Intel Xeon, 2
    // cores) at 4.7-5.5 in 128 KiB, 6.7-8.3 in 512 KiB, 7.0-8.7 in 1 MiB, against UCX's
    // 7.0-7.8 beside them; latency unchanged.  Pages are touched as records reach them; a
    // host of many VIs sets 8 KiB (the VI-scale figures do).
    ROW("SHM_RING_SIZE", "524288", u32, ring_size, 2048, 1u << 24,
        "bytes of each direction's ring in a shm connection (power of two)", nullptr),
    ROW("SHM_FORCE_DOORBELL", "0", boolean, force_doorbell, 0, 1,
        "ring the peer's doorbell on every post even when it is awake (for measurements)",
        "FORCE_DOORBELL"),
    ROW("SHM_CMA", "1", boolean, cma, 0, 1,
        "use cross-memory attach (process_vm_readv/writev); 0 forces the pipelined copy", "CMA"),
    ROW("SHM_LIVENESS_MS", "10", u32, liveness_ms, 1, 60000,
        "calls that do not sleep check that the peer is alive this often", "LIVENESS_MS"),
};
#undef ROW

void check(void *values, std::vector<std::string> &bad) {
    uint32_t &ring = static_cast<ShmConfig *>(values)->ring_size;
    if (ring & (ring - 1)) {
        bad.push_back("VIPL_SHM_RING_SIZE (not a power of two)");
        ring = 524288;
    }
}

} // namespace

ConfigTable &config_table() {
    static ConfigOf<ShmConfig> table(kRows, check);
    return table;
}

const ShmConfig &config() {
    return static_cast<ConfigOf<ShmConfig> &>(config_table()).get();
}

} // namespace vipl::shm
