// The spin loop (vipl/spin.h) and the spin policy a Stream hands out.
#include "helpers.h"

#include "vipl/spin.h"

#include <sched.h>

#include <atomic>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

// Records the outcomes reported to it, as a stream's policy would take them.
struct Policy {
    std::vector<bool> outcomes;
    void spin_outcome(bool won) { outcomes.push_back(won); }
};

} // namespace

TEST_CASE("deadline: passed() for never, the epoch (a look), the past and the future") {
    CHECK_FALSE(vipl::passed(vipl::kNever));
    CHECK(vipl::passed(vipl::Deadline{}));
    CHECK(vipl::passed(vipl::Clock::now() - 1ms));
    CHECK(vipl::passed(vipl::Clock::now()));
    CHECK_FALSE(vipl::passed(vipl::Clock::now() + 1h));
    CHECK(vipl::ms_left(vipl::Deadline{}) == 0);
}

TEST_CASE("spin: an empty spin looks nothing and reports nothing") {
    vipl::Spin spin;
    CHECK(spin.empty());
    spin.add({0ns, 16});
    CHECK(spin.empty());
    int looks = 0;
    CHECK(!spin.run([&] { return ++looks > 0; }, vipl::kNever));
    CHECK(looks == 0);
    Policy p;
    spin.report(p, false, false);
    CHECK(p.outcomes.empty());
}

TEST_CASE("spin: a peer on this CPU gets a few hand-offs, not a spin") {
    // A busy sibling on this CPU: every yield runs it for a while, as it would a peer
    // that answers (same process, so the same scheduling group).
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    cpu_set_t before;
    REQUIRE(sched_getaffinity(0, sizeof before, &before) == 0);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    std::atomic<bool> stop{false};
    std::atomic<int> rounds{0};
    std::thread sibling([&] {
        sched_setaffinity(0, sizeof one, &one);
        while (!stop.load()) {
            auto t0 = vipl::Clock::now();
            while (vipl::Clock::now() - t0 < 50us) {
            }
            rounds.fetch_add(1);
            sched_yield();
        }
    });
    // The sibling must be on this CPU's run queue before the first hand-off: a yield
    // before it ever ran may find nobody to run.
    for (int i = 0; i < 10000 && rounds.load() < 2; ++i) sched_yield();
    REQUIRE(rounds.load() >= 2);
    vipl::Spin spin;
    spin.add({0ns, 0, true});
    CHECK(spin.empty());
    CHECK(spin.active());
    int looks = 0;
    CHECK(!spin.run([&] { return ++looks < 0; }, vipl::kNever));
    CHECK(looks == static_cast<int>(vipl::Spin::kHandoffs));
    Policy missed;
    spin.report(missed, false, false); // hand-offs that found nothing are a miss
    CHECK(missed.outcomes == std::vector<bool>{false});
    looks = 0;
    CHECK(spin.run([&] { return ++looks == 2; }, vipl::kNever));
    CHECK(looks == 2);
    Policy p;
    spin.report(p, true, true); // an answer after a hand-off: it paid
    CHECK(p.outcomes == std::vector<bool>{true});
    stop = true;
    sibling.join();
    sched_setaffinity(0, sizeof before, &before);
}

TEST_CASE("spin: hand-offs stop at a yield that ran nobody") {
    // Alone on this CPU (nothing else of ours runnable), a yield comes straight back:
    // more would bring nothing.  Another process of the machine may still run in one,
    // so only the bounds are sure; the report is a miss either way.
    vipl::Spin spin;
    spin.add({0ns, 0, true});
    int looks = 0;
    CHECK(!spin.run([&] { return ++looks < 0; }, vipl::kNever));
    CHECK(looks >= 1);
    CHECK(looks <= static_cast<int>(vipl::Spin::kHandoffs));
    Policy p;
    spin.report(p, false, false);
    CHECK(p.outcomes == std::vector<bool>{false});
}

TEST_CASE("spin: it lasts as long as the longest budget, or until the deadline") {
    vipl::Spin spin;
    spin.add({1ms, 0});
    spin.add({20ms, 0});
    spin.add({5ms, 0});
    auto t0 = vipl::Clock::now();
    CHECK(!spin.run([] { return false; }, vipl::kNever));
    CHECK(vipl::Clock::now() - t0 >= 20ms);
    CHECK(vipl::Clock::now() - t0 < 2s);

    t0 = vipl::Clock::now();
    CHECK(!spin.run([] { return false; }, t0 + 3ms));
    CHECK(vipl::Clock::now() - t0 >= 3ms);
    CHECK(vipl::Clock::now() - t0 < 15ms + 1s); // not the whole budget (a loose bound)
}

TEST_CASE("spin: an answer ends it; the outcome goes to the VIs as the policy wants") {
    vipl::Spin spin;
    spin.add({1s, 0});
    int looks = 0;
    CHECK(spin.run([&] { return ++looks == 3; }, vipl::kNever));
    CHECK(looks == 3);
    CHECK(spin.won()); // no yield ran anything
    Policy answered, quiet, lost;
    spin.report(answered, true, true);
    spin.report(quiet, true, false);
    spin.report(lost, false, false);
    CHECK(answered.outcomes == std::vector<bool>{true});
    CHECK(quiet.outcomes.empty()); // another VI answered: nothing learnt
    CHECK(lost.outcomes == std::vector<bool>{false});
}

// A fresh process with VIPL_SPIN_CONTENDED=0 (below): a loaded host (tests running
// beside this one) must not decide the budgets.
TEST_CASE("spin budget (fresh process)", "[.][spin-budget]") {
    for (const std::string &base : vt::providers()) {
        INFO(base);
        vipl::StreamOptions o;
        o.spin_us = 64;
        auto p = vt::connect_pair(base, o);
        // The peer end never waited: its CPU is unknown, so the spinner yields now and then.
        // The full budget is the base, or four times it where the transport sees the peer at
        // work (shm: not asleep on the connection).
        vipl::SpinBudget b = p.client.spin_budget();
        const auto full = b.time;
        CHECK((full == 64us || full == 256us));
        CHECK(b.yield_every > 0);
        // Misses halve the budget, each; not a busy peer's, whose requests may just take
        // longer now and then (not before eight misses in a row).
        const bool busy = full == 256us;
        for (int i = 0; i < 3; ++i) p.client.spin_outcome(false);
        CHECK(p.client.spin_budget().time == (busy ? full : full / 8));
        p.client.spin_outcome(true);
        CHECK(p.client.spin_budget().time == full);
        CHECK(vipl::Stream().spin_budget().time == 0ns);

        vipl::StreamOptions none;
        none.spin_us = 0;
        auto q = vt::connect_pair(base, none);
        CHECK(q.client.spin_budget().time == 0ns);
    }
}

TEST_CASE("stream: spin_budget is the policy's, with spin_us as the base") {
    CHECK(vt::run_fresh("spin budget (fresh process)", {"VIPL_SPIN_CONTENDED=0"}) == 0);
}
