// The tcp provider's configuration keys (VIPL_TCP_*): declared in tcp_config.cc, listed
// after the core's and shm's by VipConfigInfo.
#pragma once

#include "core/config.h"

#include <cstdint>

namespace vipl::tcp {

struct TcpConfig {
    uint32_t port_base;     // TCP_PORT_BASE
    uint32_t port_range;    // TCP_PORT_RANGE
    uint32_t dead_ms;       // TCP_DEAD_MS
    uint32_t frame_wait_us; // TCP_FRAME_WAIT_US
    uint32_t ack_threshold; // TCP_ACK_THRESHOLD
    uint32_t window;        // TCP_WINDOW
};

// This process's values; read on first use, thread safe.
const TcpConfig &config();
ConfigTable &config_table();

} // namespace vipl::tcp
