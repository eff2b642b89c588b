// Random numbers for identifiers (a NIC's id, DNS query ids): the kernel's getrandom.
//
// Not std::random_device: its first use asks the CPU (CPUID) which generators it has,
// and under a hypervisor that traps; in a freshly forked server process opening its
// first connection it cost tens of microseconds.
#pragma once

#include <cstdint>
#include <ctime>
#include <sys/random.h>
#include <unistd.h>

namespace vipl {

// 64 random bits; never blocks.  Without entropy yet (early boot) the clock, pid and
// an address stand in: unique enough for identifiers, which is all they serve.
inline uint64_t random_u64() {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof v)) return v;
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
    v ^= static_cast<uint64_t>(getpid()) << 40;
    v ^= reinterpret_cast<uintptr_t>(&v);
    return v * 0x9E3779B97F4A7C15ull;
}

} // namespace vipl
