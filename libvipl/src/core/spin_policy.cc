// The adaptive spin policy of a VI in this process (wait.h: spin_plan, spin_outcome):
// how long a waiter spins before it sleeps, learnt from how its spins ended.  vi_wait
// spends it; VipViSpinBudget hands it to a program that waits on its own.
#include "core/wait.h"

#include "core/clock.h"
#include "core/config.h"
#include "core/vi.h"
#include "prov/provider.h"

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

namespace vipl {

// One wait in `one_in` (a power of two) on average, at random: two peers that
// wait in step must not probe at fixed, different moments for ever.
static bool probe_now(uint32_t one_in) {
    static thread_local uint32_t t_rng __attribute__((tls_model("initial-exec"))) = 0;
    uint32_t x = t_rng ? t_rng : static_cast<uint32_t>(now_ns()) | 1u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    t_rng = x;
    return (x & (one_in - 1)) == 0;
}

// Whether other tasks wait for this thread's CPU: more than a tenth of the
// time since the last look went by runnable but not running (the run delay of
// /proc/thread-self/schedstat), looked at every kLookPace at most.  A spinner
// there takes the CPU from work that would run in its place (a database node
// with more processes than CPUs): spin_plan then gives no longer spin for a
// peer at work.  No /proc: never.
//
// The pace: a look costs three system calls and a path walk in /proc (8 us on
// an EPYC host; a descriptor kept per thread would cost 1 us, but the library
// leaves no descriptor open once its NICs are closed).  At 2 ms, on every wait, a
// backend of a busy database node looked about once a transaction (Table 2,
// TPC-B-like); at 10 ms half as often, and made only where its answer decides
// something (spin_plan), under one in twenty.  A node's load changes more slowly.
static bool cpu_contended() {
    constexpr uint64_t kLookPace = 10'000'000; // ns
    struct Look {
        uint64_t next = 0, at = 0, delay = 0;
        bool busy = false;
    };
    static thread_local Look t_look __attribute__((tls_model("initial-exec")));
    Look &l = t_look;
    // The coarse clock (a tick of 1-4 ms) is enough to pace the looks and costs less.
    uint64_t now = coarse_ns();
    if (now < l.next) return l.busy;
    l.next = now + kLookPace;
    int saved = errno;
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    char buf[96];
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    errno = saved;
    unsigned long long run = 0, delay = 0;
    if (n <= 0) return l.busy = false;
    buf[n] = 0;
    if (sscanf(buf, "%llu %llu", &run, &delay) != 2) return l.busy = false;
    l.busy = l.at && delay > l.delay && (delay - l.delay) * 10 > now - l.at;
    l.at = now;
    l.delay = delay;
    return l.busy;
}

// How long to spin before sleeping.  None when the peer waits on this very
// CPU (it could not run to answer).  Spinning that keeps failing shrinks
// (the peer answers slower than the budget, or shares the CPU unseen; not a
// peer at work on the VI, below): the
// budget halves per miss, down to nothing after 10.  Then a probe now and
// then spins four times the budget: long enough to outlast the wake-up of a
// peer that sleeps too, so that two peers that both stopped spinning find
// their way back (a win restores the full budget).  Probes that keep missing
// come ever more rarely, one wait in 32 down to one in 1024: on a database
// node whose CPU its own clients keep busy the peer's answer never comes
// within a probe, and a probe in 32 spins 2.5 us a wait (base 20 us; Table 2,
// read-only, half the reads remote: our libraries' CPU per transaction fell
// from 7 to 5 us with the back-off).  Where the peer waits is
// unknown, the CPU goes to it every few looks in case it shares ours: every
// 16th when a look is a system call, else every 64th.  Called with the VI's
// lock held.
SpinPlan spin_plan(Vi *vi, uint64_t base_ns) {
    SpinPlan plan;
    uint64_t ns = base_ns;
    const ViOps *ops = vi->nic->ops->vi;
    if (!ns || !(ops->wait_caps & kCapSpin)) return plan;
    int me = sched_getcpu();
    int peer = -1;
    if (vi->prov) peer = ops->exchange_cpu(vi, me);
    ViLocal &l = vis().local(vi);
    plan.peer_cpu_known = peer >= 0;
    l.planned_handoff = peer >= 0 && peer == me;
    if (l.planned_handoff) {
        // A peer on this CPU is answered by handing it the CPU, whatever spinning
        // taught; unless hand-offs keep running nobody: the peer sleeps, or the
        // scheduler keeps the CPU here (a peer in another session's autogroup, as a
        // PostgreSQL backend is).  Then a probe now and then.
        if (l.handoff_misses >= kHandoffMissesMax && !probe_now(kProbeEvery))
            plan.peer_cpu_known = false;
        return plan;
    }
    // A peer at work on the connection (not asleep on it) answers or gives room soon: a
    // reader copying out what a writer waits to add to, a server working on a request.
    // Four times the budget, whatever single misses taught: a sleep and a wake-up across
    // cores cost more than that on many hosts, and a request that took longer once says
    // little about the next (ski rental: spinning as long as a sleep costs never costs
    // more than twice the best).  Unless its spins keep missing: a peer at work on
    // something else (a server's client between two requests) is spun for as any other.
    // A peer asleep on the connection waits for us.
    // Nor while other tasks wait for this CPU: a caller whose peer takes longer than the
    // budget leaves the CPU to them.  Spins that win go on (a server whose next request
    // comes within the budget: no wake-up to pay), spins that miss shrink as anywhere.
    // The CPU is looked at only here, where it decides something (a look is costly).
    l.planned_probe = false;
    l.planned_busy = vi->prov && ops->peer_busy(vi);
    if (l.planned_busy && l.busy_misses < kBusyMissesMax &&
        !(config().spin_contended && cpu_contended())) {
        ns *= kBusyPeerFactor;
    } else if (l.spin_misses >= kSpinMissesMax) {
        if (!probe_now(kProbeEvery << l.probe_misses)) return SpinPlan{};
        l.planned_probe = true;
        ns *= 4;
    } else {
        ns >>= l.spin_misses;
    }
    plan.ns = ns;
    plan.yield_every = plan.peer_cpu_known ? 0 : (ops->wait_caps & kCapSpinByProgress) ? 16 : 64;
    return plan;
}

void spin_outcome(Vi *vi, bool won) {
    ViLocal &l = vis().local(vi);
    if (l.planned_handoff) {
        if (won)
            l.handoff_misses = 0;
        else if (l.handoff_misses < kHandoffMissesMax)
            ++l.handoff_misses;
        return;
    }
    if (won) {
        l.spin_misses = 0;
        l.busy_misses = 0;
        l.probe_misses = 0;
        return;
    }
    if (l.planned_probe && l.probe_misses < kProbeMissesMax) ++l.probe_misses;
    if (l.planned_busy && l.busy_misses < kBusyMissesMax) ++l.busy_misses;
    if (l.spin_misses < kSpinMissesMax) ++l.spin_misses;
}

} // namespace vipl
