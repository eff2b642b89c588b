// Monotonic time helpers and deadline arithmetic for millisecond VIPL timeouts.
#pragma once

#include <vipl.h>

#include <cstdint>
#include <ctime>

namespace vipl {

inline uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

// Cheap clock (a few ns through the vDSO) with jiffy resolution; enough for liveness checks.
inline uint64_t coarse_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

constexpr uint64_t kNoDeadline = UINT64_MAX;

inline bool is_infinite(VIP_ULONG timeout_ms) {
    return timeout_ms >= VIP_INFINITE;
}

inline uint64_t deadline_after_ms(VIP_ULONG timeout_ms) {
    if (is_infinite(timeout_ms)) return kNoDeadline;
    return now_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ull;
}

// Milliseconds left until deadline for poll(): -1 for none, rounded up so we never wake early.
inline int poll_timeout_ms(uint64_t deadline) {
    if (deadline == kNoDeadline) return -1;
    uint64_t now = now_ns();
    if (now >= deadline) return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > 0x7fffffff ? 0x7fffffff : static_cast<int>(ms);
}

inline timespec to_timespec(uint64_t deadline) {
    uint64_t now = now_ns();
    uint64_t left = deadline > now ? deadline - now : 0;
    return timespec{static_cast<time_t>(left / 1000000000ull),
                    static_cast<long>(left % 1000000000ull)};
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#else
    asm volatile("" ::: "memory");
#endif
}

} // namespace vipl
