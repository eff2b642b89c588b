// The libvipl side of a benchmark: one process's end of a VI connection
// driven through the harness (see vipl_bench.cc for the message flow).
#pragma once

#include "harness.h"

#include <memory>

namespace bench {

// The transport of bench-vipl: a ViplConn on the device the options name.
std::unique_ptr<Transport> vipl_transport();

} // namespace bench
