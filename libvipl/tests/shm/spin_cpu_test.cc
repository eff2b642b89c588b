// VipViSpinBudget on shm, where the two ends exchange the CPUs they wait on: no spin
// when the peer last waited on the caller's CPU, and no yields once its CPU is known.
#include "procs.h"

#include <sched.h>
#include <unistd.h>

namespace {

bool pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 && sched_getcpu() == cpu;
}

} // namespace

// The exact budgets hold while this thread's CPU is free: run in a fresh process with the
// contended rule off (VIPL_SPIN_CONTENDED=0), so that a loaded host cannot shorten them.
TEST_CASE("shm spin budget: CPUs (fresh process)", "[.][spin-cpu-fresh]") {
    REQUIRE(sysconf(_SC_NPROCESSORS_ONLN) >= 2);
    cpu_set_t saved;
    REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
    vt::Nic na("shm0"), nb("shm0");
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    const VIP_UINT64 base = 50000;
    VIP_SPIN_BUDGET a{}, b{};

    REQUIRE(pin(0));
    REQUIRE(VipViSpinBudget(p.b, base, &b) == VIP_SUCCESS); // b publishes CPU 0
    REQUIRE(VipViSpinBudget(p.a, base, &a) == VIP_SUCCESS); // a waits there too
    CHECK(a.PeerCpuKnown == VIP_TRUE);
    CHECK(a.Nanoseconds == 0);

    REQUIRE(pin(1));
    REQUIRE(VipViSpinBudget(p.a, base, &a) == VIP_SUCCESS); // the peer is on CPU 0
    CHECK(a.PeerCpuKnown == VIP_TRUE);
    CHECK(a.Nanoseconds == 4 * base); // and not asleep on the connection: at work
    CHECK(a.YieldEvery == 0);
    // And b learns that a waits on CPU 1 now.
    REQUIRE(pin(0));
    REQUIRE(VipViSpinBudget(p.b, base, &b) == VIP_SUCCESS);
    CHECK(b.PeerCpuKnown == VIP_TRUE);
    CHECK(b.Nanoseconds == 4 * base);
    // VipQueryViPeerCpu reads the same exchange: a said CPU 1, b CPU 0.
    int cpu = -2;
    REQUIRE(VipQueryViPeerCpu(p.b, &cpu) == VIP_SUCCESS);
    CHECK(cpu == 1);
    REQUIRE(pin(1));
    REQUIRE(VipQueryViPeerCpu(p.a, &cpu) == VIP_SUCCESS); // a says 1, reads b's 0
    CHECK(cpu == 0);
    REQUIRE(VipQueryViPeerCpu(p.b, &cpu) == VIP_SUCCESS); // b says 1 now, reads a's 1
    CHECK(cpu == 1);
    REQUIRE(VipViSpinBudget(p.a, base, &a) == VIP_SUCCESS); // both wait on CPU 1
    CHECK(a.PeerCpuKnown == VIP_TRUE);
    CHECK(a.Nanoseconds == 0);

    sched_setaffinity(0, sizeof saved, &saved);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("shm spin budget: none when the peer waits on this CPU, no yields when it is known",
          "[spin]") {
    int status = vt::run_fresh("shm spin budget: CPUs (fresh process)", {"VIPL_SPIN_CONTENDED=0"});
    INFO(vt::status_text(status));
    CHECK(status == 0);
}

TEST_CASE("shm spin budget: hand-offs that keep finding nothing are no longer offered", "[spin]") {
    cpu_set_t saved;
    REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
    vt::Nic na("shm0"), nb("shm0");
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    const VIP_UINT64 base = 50000;
    VIP_SPIN_BUDGET a{}, b{};
    REQUIRE(pin(0));
    REQUIRE(VipViSpinBudget(p.b, base, &b) == VIP_SUCCESS);
    REQUIRE(VipViSpinBudget(p.a, base, &a) == VIP_SUCCESS);
    REQUIRE(a.PeerCpuKnown == VIP_TRUE); // a hand-off plan
    REQUIRE(a.Nanoseconds == 0);
    // Four misses in a row (a peer in another autogroup never gets the CPU).
    for (int i = 0; i < 4; ++i) {
        REQUIRE(VipViSpinBudget(p.a, base, &a) == VIP_SUCCESS);
        REQUIRE(VipViSpinOutcome(p.a, VIP_FALSE) == VIP_SUCCESS);
    }
    // Then almost every plan is a plain sleep; a probe (1 in 32 on average) hands off.
    int offered = 0;
    for (int i = 0; i < 200; ++i) {
        REQUIRE(VipViSpinBudget(p.a, base, &a) == VIP_SUCCESS);
        CHECK(a.Nanoseconds == 0);
        if (a.PeerCpuKnown) ++offered;
    }
    CHECK(offered < 40);
    // A probe that pays brings the hand-offs back at once.
    for (int i = 0; i < 1000; ++i) {
        REQUIRE(VipViSpinBudget(p.a, base, &a) == VIP_SUCCESS);
        if (a.PeerCpuKnown) break;
    }
    REQUIRE(a.PeerCpuKnown == VIP_TRUE);
    REQUIRE(VipViSpinOutcome(p.a, VIP_TRUE) == VIP_SUCCESS);
    for (int i = 0; i < 20; ++i) {
        REQUIRE(VipViSpinBudget(p.a, base, &a) == VIP_SUCCESS);
        CHECK(a.PeerCpuKnown == VIP_TRUE);
    }
    sched_setaffinity(0, sizeof saved, &saved);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("shm spin budget: four times the base while the peer is at work, the base while it "
          "sleeps on the connection",
          "[spin]") {
    REQUIRE(sysconf(_SC_NPROCESSORS_ONLN) >= 2);
    cpu_set_t saved;
    REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
    vt::Nic na("shm0"), nb("shm0");
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    const VIP_UINT64 base = 50000;
    VIP_SPIN_BUDGET a{};
    // b never waited: at work as far as a can tell.
    REQUIRE(pin(1));
    REQUIRE(VipViSpinBudget(p.a, base, &a) == VIP_SUCCESS);
    CHECK(a.Nanoseconds == 4 * base);
    // b arms its wait fd on CPU 0, as a program does right before it sleeps.
    REQUIRE(pin(0));
    int fd = -1;
    REQUIRE(VipGetViWaitFdEx(p.b, VIP_WAITFD_EXPLICIT_ARM, &fd) == VIP_SUCCESS);
    REQUIRE(VipArmViWaitFd(p.b) == VIP_SUCCESS);
    REQUIRE(pin(1));
    REQUIRE(VipViSpinBudget(p.a, base, &a) == VIP_SUCCESS);
    CHECK(a.PeerCpuKnown == VIP_TRUE);
    CHECK(a.Nanoseconds == base);
    sched_setaffinity(0, sizeof saved, &saved);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}
