// The out-of-line part of the spin loop (vipl/spin.h).
#include "vipl/spin.h"

#include <sched.h>

namespace vipl {

bool Spin::yield_ran_other() noexcept {
    auto before = Clock::now();
    sched_yield();
    // A yield that finds nobody else to run returns within a microsecond.
    return Clock::now() - before > std::chrono::microseconds(2);
}

} // namespace vipl
