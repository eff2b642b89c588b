// One spin loop for every waiter that polls VIs before it sleeps: a stream's blocking
// call, the omniORB transport, a program waiting on many streams.
//
// How long to spin is libvipl's adaptive policy, one state per VI and process
// (VipViSpinBudget / VipViSpinOutcome in vipl_ext.h; Stream::spin_budget() and
// Stream::spin_outcome() hand it out): the base budget halves per spin that found
// nothing, a probe now and then brings it back, none when the peer waits on this CPU.
// This loop spends the budget: it calls the caller's look until it answers, yields the
// CPU every few looks while a peer's CPU is unknown (it may share ours), reads the clock
// only every kLooksPerClock looks, and tells whether the answer counts for the policy.
// A look that sees the peer at work without an answer yet (a completion) calls
// extend(): the budget starts again, so a writer waiting for room spins as long as its
// reader keeps taking.  A peer waiting on this very CPU gets kHandoffs hand-offs
// instead (yield, look): on
// one core that costs less than sleeping and being woken (an 8-byte stream round trip
// 2.1 us against 5.9; a 1 KiB omniORB call 6.8 against 10.5).
//
//   vipl::Spin spin;
//   for (auto &s : streams) spin.add(s.spin_budget());
//   bool got = spin.run([&] { return any_ready(streams); }, deadline);
//   for (auto &s : streams) spin.report(s, got, got && ready(s)); // then sleep if !got
//
// Reporting: a VI whose peer answered while spinning won, unless the answer came only
// after a yield that let another task run (a peer on this CPU answers a sleeper as
// well); when the spin ran out every VI missed; a VI that stayed quiet while another
// answered learns nothing.  Hand-offs report too: they stop at the first yield that ran
// nobody, and libvipl stops offering them when they keep finding nothing (a peer in
// another autogroup never gets the CPU from a yield).  A spin with neither budget nor
// hand-offs reports nothing.
//
// Threads: a Spin belongs to one thread.  Signals: a handler that runs during the spin
// does not end it (the look decides).  Nothing here makes a system call but
// sched_yield().
#pragma once

#include "vipl/deadline.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>

namespace vipl {

// What a VI's policy allows a waiter now.
struct SpinBudget {
    std::chrono::nanoseconds time{0}; // how long to spin; 0: sleep at once
    uint32_t yield_every = 0;         // looks between two yields of the CPU; 0: never
    // The peer waits on this very CPU: spinning cannot help, but handing it the CPU a
    // few times (yield, look) costs less than sleeping and being woken.
    bool peer_here = false;
};

class Spin {
public:
    // Clock reads: one per this many looks (a look costs from tens of nanoseconds on shm
    // to a system call on tcp; a spin may outlast its budget by this many looks).
    static constexpr unsigned kLooksPerClock = 8;
    // Hand-offs to a peer on this CPU before sleeping.
    static constexpr unsigned kHandoffs = 4;

    // Joins a VI's budget: the spin lasts as long as the longest one and yields as often
    // as the one that asks most often.
    void add(const SpinBudget &b) noexcept {
        time_ = std::max(time_, b.time);
        if (b.yield_every && (!yield_every_ || b.yield_every < yield_every_))
            yield_every_ = b.yield_every;
        handoff_ |= b.peer_here;
    }
    // No spin (then nothing is reported), though maybe hand-offs.
    bool empty() const noexcept { return time_.count() <= 0; }
    // Whether run() does anything at all.
    bool active() const noexcept { return !empty() || handoff_; }

    // Calls look() until it returns true (returns true), or the budget or the deadline
    // passes (false).  Without a budget, only hands the CPU to a peer waiting on this one
    // (kHandoffs times: yield, look) when one does.
    template <class Look>
    bool run(Look &&look, Deadline deadline) {
        handed_cpu_ = false;
        if (empty()) {
            handed_off_ = handoff_;
            for (unsigned i = 0; handoff_ && i < kHandoffs; ++i) {
                bool ran = yield_ran_other();
                if (look()) return true;
                // Nobody ran: the peer sleeps, or the scheduler keeps the CPU here.
                // More yields would bring nothing either.
                if (!ran) break;
            }
            return false;
        }
        handed_off_ = false;
        Deadline end = deadline - Clock::now() < time_ ? deadline : Clock::now() + time_;
        extended_ = false;
        for (unsigned i = 1;; ++i) {
            if (look()) return true;
            relax();
            // Only the last yield decides: a peer on this CPU that answered after it
            // would have answered a sleeper as well.
            if (yield_every_ && i % yield_every_ == 0) handed_cpu_ = yield_ran_other();
            if (i % kLooksPerClock == 0) {
                Deadline now = Clock::now();
                if (extended_) {
                    extended_ = false;
                    end = deadline - now < time_ ? deadline : now + time_;
                } else if (now >= end) {
                    return false;
                }
            }
        }
    }

    // Called by a look that saw the peer at work without an answer yet: the budget
    // starts again from the next clock read (never past the deadline).  A peer that
    // keeps working keeps the spinner spinning; one that stalls for a budget does not.
    void extend() noexcept { extended_ = true; }

    // After run() returned true: whether the answer counts as a win for the policy.
    bool won() const noexcept { return !handed_cpu_; }

    // Tells one VI's policy how the spin ended for it (see the header): `answered` = its
    // peer gave the answer.  `V` has spin_outcome(bool) (a Stream).
    template <class V>
    void report(V &v, bool got, bool answered) const {
        if (empty() && !handed_off_) return;
        if (!got)
            v.spin_outcome(false);
        else if (answered)
            v.spin_outcome(won());
    }

    // One pause of a spin loop: lets the sibling hardware thread run.
    static void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        asm volatile("yield");
#endif
    }

private:
    // Yields the CPU; whether another task ran meanwhile (the yield took a while).
    static bool yield_ran_other() noexcept;

    std::chrono::nanoseconds time_{0};
    uint32_t yield_every_ = 0;
    bool handoff_ = false;
    bool handed_off_ = false; // the last run() handed the CPU instead of spinning
    bool extended_ = false;   // a look saw the peer at work since the last clock read
    bool handed_cpu_ = false;
};

} // namespace vipl
