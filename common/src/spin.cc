// The out-of-line part of the spin loop (vipl/spin.h).
#include "vipl/spin.h"

#include <sched.h>

namespace vipl {

bool Spin::yield_ran_other() noexcept {
#if defined(__x86_64__)
    // The TSC, not the clock: two clock reads would cost more than the yield that finds
    // nobody.  4096 ticks are 1 to 2 us at 2 to 4 GHz; a yield that finds nobody else to
    // run returns within half of that, one that ran another task (two context switches
    // and its work) takes longer.
    uint64_t before = __builtin_ia32_rdtsc();
    sched_yield();
    return __builtin_ia32_rdtsc() - before > 4096;
#else
    auto before = Clock::now();
    sched_yield();
    // A yield that finds nobody else to run returns within a microsecond.
    return Clock::now() - before > std::chrono::microseconds(2);
#endif
}

} // namespace vipl
