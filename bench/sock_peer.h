// The socket side of a benchmark: blocking stream sockets (see
// sock_bench.cc for the variants).
#pragma once

#include "harness.h"

#include <memory>

namespace bench {

// The transport of bench-sock: --variant unix or tcp.
std::unique_ptr<Transport> sock_transport();

} // namespace bench
