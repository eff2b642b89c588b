// Doorbells: a sleeper arms its end; the peer rings (writes the sleeper's
// eventfd) only when it finds the end armed.  Each arming takes a new epoch so
// a ringer that read an old arming cannot clear a newer one.
#include "core/clock.h"
#include "core/config.h"
#include "core/fds.h"
#include "prov/shm/shm.h"
#include "prov/shm/shm_config.h"

#include <cerrno>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

namespace vipl::shm {

// Compare-and-swap loops on a word the peer writes too end after this many failures.
constexpr int kCasTries = 64;

// The peer's spin loop reads this line: write it only when the value changes.
static void publish_cpu(Endpoint *ep, int cpu) {
    if (ep->me->cpu.load(std::memory_order_relaxed) != cpu)
        ep->me->cpu.store(cpu, std::memory_order_relaxed);
}

void arm(Vi *vi, unsigned what) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return;
    // Where we sleep tells a spinning peer on the same CPU not to spin.
    publish_cpu(ep, sched_getcpu());
    // Outgoing work blocked on ring space needs the peer's consumption,
    // whatever the sleeper itself waits for.
    if (vi->sq.cursor != vi->sq.tail || ep->stalled) what |= kWakeSend;
    uint64_t w = ep->me->waiter.load(std::memory_order_relaxed);
    // A fresh epoch unless already armed for all of `what`: a ringer holding
    // an older arming then fails its compare-and-swap instead of clearing this one.
    // An honest peer only clears the armed bits, so a few tries do; a peer that
    // keeps changing the word gets it stored over (its own wake-ups are its loss).
    for (int tries = 0; (w & what) != what; ++tries) {
        uint64_t want = (((w >> 2) + 1) << 2) | (w & 3) | what;
        if (tries == kCasTries) {
            ep->me->waiter.store(want, std::memory_order_seq_cst);
            break;
        }
        if (ep->me->waiter.compare_exchange_weak(w, want, std::memory_order_seq_cst)) break;
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

void disarm(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return;
    uint64_t w = ep->me->waiter.load(std::memory_order_relaxed);
    // A ringer that read the armed word fails its compare-and-swap and looks again.
    for (int tries = 0; (w & 3); ++tries) {
        if (tries == kCasTries) {
            ep->me->waiter.store(w & ~3ull, std::memory_order_seq_cst);
            break;
        }
        if (ep->me->waiter.compare_exchange_weak(w, w & ~3ull, std::memory_order_seq_cst)) break;
    }
}

bool armed(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    return ep && ep->up && (ep->me->waiter.load(std::memory_order_acquire) & 3);
}

// A full barrier: what was published must be visible before the peer's word
// is read (and the peer does the same the other way round before sleeping).
// On x86 a locked no-op on the stack does it cheaper than mfence.
static inline void full_barrier() {
#if defined(__x86_64__)
    asm volatile("lock orq $0, -8(%%rsp)" ::: "memory", "cc");
#else
    std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

void ring_peer(Vi *vi, Endpoint *ep, unsigned what) {
    if (ep->force_doorbell) {
        eventfd_ring(ep->peer_efd);
        ++vi->counters.DoorbellsRung;
        return;
    }
    full_barrier();
    uint64_t w = ep->peer->waiter.load(std::memory_order_relaxed);
    // One ring wakes the sleeper whatever it armed for; it arms again if it sleeps again.
    // The word is the peer's: one that keeps changing it is rung after a few tries.
    for (int tries = 0; w & what; ++tries) {
        if (tries == kCasTries ||
            ep->peer->waiter.compare_exchange_weak(w, w & ~3ull, std::memory_order_seq_cst)) {
            eventfd_ring(ep->peer_efd);
            ++vi->counters.DoorbellsRung;
            return;
        }
    }
}

int wait_fds(Vi *vi, pollfd *fds, int max) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up || ep->sock < 0 || max < 1) return 0;
    fds[0] = pollfd{ep->sock, POLLIN | POLLRDHUP, 0};
    return 1;
}

int exchange_cpu(Vi *vi, int my_cpu) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return -1;
    publish_cpu(ep, my_cpu);
    return ep->peer->cpu.load(std::memory_order_relaxed);
}

bool peer_busy(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    // Armed bits: the peer sleeps on this connection, or is about to.
    return ep && ep->up && !(ep->peer->waiter.load(std::memory_order_relaxed) & 3);
}

bool peer_hung_up(Vi *, Endpoint *ep, bool force) {
    uint64_t now = coarse_ns();
    if (!force && now < ep->next_liveness) return false;
    ep->next_liveness = now + config().liveness_ms * 1000000ull;
    pollfd p{ep->sock, POLLIN | POLLRDHUP, 0};
    int saved = errno;
    int n = poll(&p, 1, 0);
    errno = saved;
    return n > 0 && (p.revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR));
}

} // namespace vipl::shm
