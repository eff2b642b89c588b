// The shm provider's configuration keys (VIPL_SHM_*): declared in shm_config.cc, listed
// after the core's by VipConfigInfo.
#pragma once

#include "core/config.h"

#include <cstdint>

namespace vipl::shm {

struct ShmConfig {
    uint32_t copy_threshold; // SHM_COPY_THRESHOLD (was COPY_THRESHOLD)
    uint32_t get_align;      // SHM_GET_ALIGN (was GET_ALIGN)
    uint32_t ring_size;      // SHM_RING_SIZE
    bool force_doorbell;     // SHM_FORCE_DOORBELL (was FORCE_DOORBELL)
    bool cma;                // SHM_CMA (was CMA)
    uint32_t liveness_ms;    // SHM_LIVENESS_MS (was LIVENESS_MS)
};

// This process's values; read on first use, thread safe.
const ShmConfig &config();
ConfigTable &config_table();

} // namespace vipl::shm
