// Doorbells: a sleeper arms its end; the peer rings (writes the sleeper's
// eventfd) only when it finds the end armed.  Each arming takes a new epoch so
// a ringer that read an old arming cannot clear a newer one.
#include "core/clock.h"
#include "core/config.h"
#include "prov/shm/shm.h"

#include <cerrno>
#include <poll.h>
#include <unistd.h>

namespace vipl::shm {

void arm(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return;
    uint64_t w = ep->me->waiter.load(std::memory_order_relaxed);
    while (!(w & 1) && !ep->me->waiter.compare_exchange_weak(w, (((w >> 1) + 1) << 1) | 1,
                                                             std::memory_order_seq_cst)) {
    }
    // Already armed: keep that arming; the peer clears it when it rings.
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool armed(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    return ep && ep->up && (ep->me->waiter.load(std::memory_order_acquire) & 1);
}

void ring_peer(Vi *vi, Endpoint *ep) {
    uint64_t one = 1;
    if (ep->force_doorbell) {
        int saved = errno;
        ssize_t n = write(ep->peer_efd, &one, sizeof one);
        (void)n;
        errno = saved;
        ++vi->counters.DoorbellsRung;
        return;
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    uint64_t w = ep->peer->waiter.load(std::memory_order_relaxed);
    while (w & 1) {
        if (ep->peer->waiter.compare_exchange_weak(w, w & ~1ull, std::memory_order_seq_cst)) {
            int saved = errno;
            ssize_t n = write(ep->peer_efd, &one, sizeof one);
            (void)n;
            errno = saved;
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
    ep->me->cpu.store(my_cpu, std::memory_order_relaxed);
    return ep->peer->cpu.load(std::memory_order_relaxed);
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
