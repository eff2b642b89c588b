// What every provider does the same way with its per-VI endpoint (vi->prov), over its
// own Endpoint type: destroying it, and a peer-to-peer connection's progress.  Each provider keeps
// its own Endpoint, P2p and their disconnect/p2p_free, found here by argument-dependent lookup in
// its namespace.
#pragma once

#include "core/arena.h"
#include "core/clock.h"
#include "core/objects.h"

#include <algorithm>
#include <poll.h>

namespace vipl::util {

// Disconnects the VI (the provider's disconnect, which frees any peer-to-peer state)
// and frees its endpoint from where it was made: shared memory for a shareable VI.
template <class Endpoint>
void destroy_endpoint(Vi *vi, Endpoint *ep, void (*disconnect)(Vi *)) {
    if (!ep) return;
    disconnect(vi);
    ep->~Endpoint();
    object_free(ep, sizeof(Endpoint), vi->shareable);
    vi->prov = nullptr;
}

// One side's step of a peer-to-peer connection under way.
template <class Endpoint, class P2p>
using PeerSide = VIP_RETURN (*)(Vi *, Endpoint *, P2p *, VIP_VI_ATTRIBUTES *, pollfd *, int *,
                                uint64_t *);

// A peer-to-peer connection's progress (VipConnectPeerWait): none under way, or its
// deadline passed (its state freed by the provider's p2p_free); else the acceptor's or
// connector's step, with *deadline already the connection's.
template <class Endpoint, class P2p>
VIP_RETURN peer_progress(Vi *vi, VIP_VI_ATTRIBUTES *rattrs, pollfd *fds, int *nfds,
                         uint64_t *deadline, PeerSide<Endpoint, P2p> acceptor,
                         PeerSide<Endpoint, P2p> connector) {
    auto *ep = static_cast<Endpoint *>(vi->prov);
    P2p *p = ep->p2p;
    *nfds = 0;
    if (!p) return VIP_INVALID_STATE;
    if (now_ns() >= p->deadline) {
        p2p_free(ep);
        return VIP_TIMEOUT;
    }
    *deadline = p->deadline;
    return (p->acceptor ? acceptor : connector)(vi, ep, p, rattrs, fds, nfds, deadline);
}

// A connector that found no listener tries again later (the peer may not have asked
// yet).  retry_after schedules the next attempt; too_soon says whether it is not due
// yet.  Either way the caller's *deadline becomes when to look again.
template <class P2p>
void retry_after(P2p *p, uint64_t now, uint64_t wait_ns, uint64_t *deadline) {
    p->next_try = now + wait_ns;
    *deadline = std::min(p->next_try, p->deadline);
}
template <class P2p>
bool too_soon(const P2p *p, uint64_t now, uint64_t *deadline) {
    if (now >= p->next_try) return false;
    *deadline = std::min(p->next_try, p->deadline);
    return true;
}

} // namespace vipl::util
