// Deadlines of the stream calls and of spinning: points in time on the steady clock.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace vipl {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
// A deadline that never comes.
inline constexpr Deadline kNever = Deadline::max();
// Whether `deadline` has come.  Two answers need no clock read (tens of nanoseconds in a
// call made per message): kNever, and Deadline{} (the clock's epoch, long past: "look
// once, never wait", what a non-blocking call passes).
inline bool passed(Deadline deadline) {
    if (deadline == kNever) return false;
    if (deadline == Deadline{}) return true;
    return Clock::now() >= deadline;
}
// A deadline `ms` milliseconds from now.
inline Deadline deadline_in(std::chrono::milliseconds ms) {
    return Clock::now() + ms;
}
// The milliseconds a poll() or a VIPL wait may sleep until `deadline`: rounded up (a
// sleep never ends before its deadline), 0 once it has passed (one more look), -1 for
// kNever; at most 2^30 (a poll() timeout is an int).
inline int ms_left(Deadline deadline) {
    if (deadline == kNever) return -1;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, int64_t{1} << 30));
}

} // namespace vipl
