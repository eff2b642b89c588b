// VipViSpinBudget / VipViSpinOutcome: the adaptive spin policy of the library's
// waits, handed to a program that waits on its own.  The peer side of the pair never
// waits or asks, so it has published no CPU: the caller's peer CPU is unknown.  The
// exact budgets are checked in fresh processes with VIPL_SPIN_CONTENDED=0: the host's
// other work must not decide them; the contended rule has a case of its own.
#include "support.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace {

VIP_SPIN_BUDGET budget(VIP_VI_HANDLE vi, VIP_UINT64 base) {
    VIP_SPIN_BUDGET b{};
    b.Nanoseconds = 12345; // overwritten on success
    REQUIRE(VipViSpinBudget(vi, base, &b) == VIP_SUCCESS);
    return b;
}

void outcome(VIP_VI_HANDLE vi, bool won) {
    REQUIRE(VipViSpinOutcome(vi, won ? VIP_TRUE : VIP_FALSE) == VIP_SUCCESS);
}

} // namespace

TEST_CASE("spin policy: halving (fresh process)", "[.][spin-policy-halving]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    const VIP_UINT64 base = 64000;

    VIP_SPIN_BUDGET b = budget(p.a, 0);
    CHECK(b.Nanoseconds == 0); // a base of 0 never spins

    // The full budget: the base, or four times it where the transport sees the peer at
    // work on the connection (shm: not asleep on it; this peer never sleeps).
    b = budget(p.a, base);
    const VIP_UINT64 full = b.Nanoseconds;
    CHECK((full == base || full == 4 * base));
    CHECK(b.PeerCpuKnown == VIP_FALSE);
    // Where the peer waits is unknown: the spinner yields every few looks.
    CHECK(b.YieldEvery > 0);
    CHECK(b.YieldEvery <= 64);

    // A peer at work keeps the budget through seven misses in a row (its requests may
    // just take longer now and then), then is spun for as any other: each miss halves it.
    const bool busy = full == 4 * base;
    for (unsigned miss = 1; miss < 10; ++miss) {
        outcome(p.a, false);
        INFO("misses " << miss);
        CHECK(budget(p.a, base).Nanoseconds == (!busy      ? full >> miss
                                                : miss < 8 ? full
                                                           : base >> miss));
    }
    outcome(p.a, true);
    CHECK(budget(p.a, base).Nanoseconds == full);

    // Budgets asked for n times in a row, none reported: how many were probes (four
    // times the base); any budget but a probe or none at all is counted in other.
    int other = 0;
    auto probes = [&](int n) {
        int probe = 0;
        other = 0;
        for (int i = 0; i < n; ++i) {
            VIP_UINT64 ns = budget(p.a, base).Nanoseconds;
            if (ns == 4 * base)
                ++probe;
            else if (ns != 0)
                ++other;
        }
        return probe;
    };

    // Ten misses: mostly no spin, sometimes (one in 32 at random) a probe of four times.
    for (int i = 0; i < 10; ++i) outcome(p.a, false);
    int probe = probes(4000);
    INFO("probes " << probe << ", other " << other);
    CHECK(other == 0);
    CHECK(probe >= 40);
    CHECK(probe <= 300);
    // Probes that miss come ever more rarely: five in a row, one wait in 1024.
    for (int missed = 0; missed < 5; ++missed) {
        bool probed = false;
        for (int i = 0; i < 100000 && !probed; ++i)
            probed = budget(p.a, base).Nanoseconds == 4 * base;
        REQUIRE(probed);
        outcome(p.a, false);
    }
    probe = probes(32000);
    INFO("after five probes that missed: probes " << probe);
    CHECK(other == 0);
    CHECK(probe >= 8);   // 31 expected
    CHECK(probe <= 100); // one in 32 would be 1000
    // A win restores the budget and the rate of probes.
    outcome(p.a, true);
    CHECK(budget(p.a, base).Nanoseconds == full);
    for (int i = 0; i < 10; ++i) outcome(p.a, false);
    probe = probes(4000);
    INFO("after a win and ten misses: probes " << probe);
    CHECK(probe >= 40);
    CHECK(probe <= 300);
    // A miss more changes nothing; a win restores the budget.
    outcome(p.a, false);
    outcome(p.a, true);
    CHECK(budget(p.a, base).Nanoseconds == full);

    VIP_SPIN_BUDGET out{};
    CHECK(VipViSpinBudget(p.a, base, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipViSpinBudget(nullptr, base, &out) == VIP_INVALID_PARAMETER);
    CHECK(VipViSpinOutcome(nullptr, VIP_TRUE) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50)) {
        CHECK(VipViSpinBudget(h, base, &out) == VIP_INVALID_PARAMETER);
        CHECK(VipViSpinOutcome(h, VIP_FALSE) == VIP_INVALID_PARAMETER);
    }
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
    CHECK(VipViSpinBudget(p.a, base, &out) == VIP_INVALID_PARAMETER);
    CHECK(VipViSpinOutcome(p.a, VIP_TRUE) == VIP_INVALID_PARAMETER);
}

TEST_CASE("spin policy: shared state (fresh process)", "[.][spin-policy-shared]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory m(na, 4096);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, nullptr,
                                  nullptr, nullptr, [&](VIP_VI_HANDLE a, VIP_VI_HANDLE) {
                                      vt::set_desc(m.desc(0), m.base + 1024, 64, m.mh);
                                      REQUIRE(VipPostRecv(a, m.desc(0), m.mh) == VIP_SUCCESS);
                                  });
    const VIP_UINT64 base = 64000;
    // A VipRecvWait that times out with nothing coming spun in vain (VIPL_SPIN_US is not
    // 0 in the tests): one miss, which the next budget shows.
    VIP_CONFIG_INFO info{};
    std::string spin_us;
    for (VIP_ULONG i = 0; i < VipConfigCount(); ++i)
        if (VipConfigInfo(i, &info) == VIP_SUCCESS && std::string(info.Name) == "SPIN_US")
            spin_us = info.Value;
    INFO("VIPL_SPIN_US " << spin_us);
    REQUIRE(!spin_us.empty());
    REQUIRE(spin_us != "0");
    const VIP_UINT64 full = budget(p.a, base).Nanoseconds; // base, or 4x: a peer at work
    CHECK((full == base || full == 4 * base));
    VIP_DESCRIPTOR *d;
    REQUIRE(VipRecvWait(p.a, 5, &d) == VIP_TIMEOUT);
    // (a peer at work keeps the full budget: see above)
    CHECK(budget(p.a, base).Nanoseconds == (full == 4 * base ? full : full / 2));
    outcome(p.a, true);
    CHECK(budget(p.a, base).Nanoseconds == full);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("spin policy: contended (fresh process)", "[.][spin-policy-contended]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    const VIP_UINT64 base = 64000;
    const bool rule = vt::config_value("SPIN_CONTENDED") == "1";
    INFO("VIPL_SPIN_CONTENDED " << vt::config_value("SPIN_CONTENDED"));
    // The first look at the run delay only starts counting: the CPU counts as free.
    const VIP_UINT64 full = budget(p.a, base).Nanoseconds;
    CHECK((full == base || full == 4 * base));

    // Two busy threads on this thread's CPU, which keeps busy too: it waits for the CPU
    // about two thirds of the time.
    cpu_set_t one, before;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    REQUIRE(sched_getaffinity(0, sizeof before, &before) == 0);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    std::atomic<bool> stop{false};
    std::vector<std::thread> hogs;
    for (int i = 0; i < 2; ++i)
        hogs.emplace_back([&] {
            sched_setaffinity(0, sizeof one, &one);
            while (!stop.load(std::memory_order_relaxed)) {
            }
        });
    auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(60)) {
    }
    const VIP_UINT64 contended = budget(p.a, base).Nanoseconds;
    stop = true;
    for (auto &t : hogs) t.join();
    REQUIRE(sched_setaffinity(0, sizeof before, &before) == 0);
    // A peer at work earns no longer spin while others wait for the CPU (the rule), or
    // keeps its budget (no rule).
    CHECK(contended == (rule ? base : full));

    // The CPU free again: asleep, this thread waits for no CPU, and the budget is back.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    CHECK(budget(p.a, base).Nanoseconds == full);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("VipViSpinBudget halves the budget per miss, probes after ten ever more rarely while "
          "probes miss, and a win restores it",
          "[ext][spin]") {
    int status = vt::run_fresh("spin policy: halving (fresh process)", {"VIPL_SPIN_CONTENDED=0"});
    INFO(vt::status_text(status));
    CHECK(status == 0);
}

TEST_CASE("VipViSpinBudget shares its state with the library's own waits", "[ext][spin]") {
    int status =
        vt::run_fresh("spin policy: shared state (fresh process)", {"VIPL_SPIN_CONTENDED=0"});
    INFO(vt::status_text(status));
    CHECK(status == 0);
}

TEST_CASE("VipViSpinBudget: while other tasks wait for the CPU a peer at work earns no longer "
          "spin (VIPL_SPIN_CONTENDED=1), as if the CPU were free with 0",
          "[ext][spin]") {
    for (const char *v : {"VIPL_SPIN_CONTENDED=1", "VIPL_SPIN_CONTENDED=0"}) {
        int status = vt::run_fresh("spin policy: contended (fresh process)", {v});
        INFO(v << ": " << vt::status_text(status));
        CHECK(status == 0);
    }
}

TEST_CASE("VipQueryViPeerCpu: where the peer last asked or waited, where the transport tells",
          "[ext][spin]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    // One CPU for the whole case: what a call publishes is the caller's CPU then.
    cpu_set_t saved, one;
    REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
    const int cpu = sched_getcpu();
    REQUIRE(cpu >= 0);
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    int a = -2, b = -2;
    REQUIRE(VipQueryViPeerCpu(p.a, &a) == VIP_SUCCESS); // a's end publishes cpu
    REQUIRE(VipQueryViPeerCpu(p.b, &b) == VIP_SUCCESS);
    // shm exchanges the CPUs (the spin policy's hand-offs need them); tcp cannot.
    const bool tells = device.starts_with("shm");
    CHECK(b == (tells ? cpu : -1));
    REQUIRE(VipQueryViPeerCpu(p.a, &a) == VIP_SUCCESS);
    CHECK(a == (tells ? cpu : -1));
    sched_setaffinity(0, sizeof saved, &saved);

    CHECK(VipQueryViPeerCpu(p.a, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryViPeerCpu(nullptr, &a) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipQueryViPeerCpu(h, &a) == VIP_INVALID_PARAMETER);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
    CHECK(VipQueryViPeerCpu(p.a, &a) == VIP_INVALID_PARAMETER);
}
