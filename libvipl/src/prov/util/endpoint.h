// What every provider does the same way with its per-VI endpoint (vi->prov), over its
// own Endpoint type: destroying it, and the first steps of a peer-to-peer
// connection's progress.  Each provider keeps its own Endpoint, P2p and their
// disconnect/p2p_free, found here by argument-dependent lookup in its namespace.
#pragma once

#include "core/arena.h"
#include "core/clock.h"
#include "core/objects.h"

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

// One step of a peer-to-peer connection (VipConnectPeerWait's progress): none under
// way, or its deadline passed (its state freed); else the acceptor's or connector's
// step, called as side(p, deadline) with the deadline already set to the
// connection's.
template <class Endpoint, class Side>
VIP_RETURN peer_step(Endpoint *ep, int *nfds, uint64_t *deadline, Side side) {
    auto *p = ep->p2p;
    *nfds = 0;
    if (!p) return VIP_INVALID_STATE;
    if (now_ns() >= p->deadline) {
        p2p_free(ep);
        return VIP_TIMEOUT;
    }
    *deadline = p->deadline;
    return side(p, deadline);
}

} // namespace vipl::util
