// Deadlines of the stream calls and of spinning: points in time on the steady clock.
#pragma once

#include <chrono>

namespace vipl {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
// A deadline that never comes.
inline constexpr Deadline kNever = Deadline::max();
// A deadline `ms` milliseconds from now.
inline Deadline deadline_in(std::chrono::milliseconds ms) {
    return Clock::now() + ms;
}

} // namespace vipl
