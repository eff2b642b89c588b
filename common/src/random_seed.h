// Seeds for identifiers and port picks: the kernel's getrandom.
//
// Not std::random_device: its first use asks the CPU (CPUID) which generators it has,
// and under a hypervisor that traps; a server process forked per connection paid it on
// every connection.
#pragma once

#include <cstdint>
#include <ctime>
#include <sys/random.h>
#include <unistd.h>

namespace vipl::detail {

// 32 random bits; never blocks (without entropy yet the clock and pid stand in).
inline uint32_t random_seed() {
    uint32_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof v)) return v;
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint32_t>(ts.tv_nsec) ^ static_cast<uint32_t>(getpid()) << 12;
}

} // namespace vipl::detail
