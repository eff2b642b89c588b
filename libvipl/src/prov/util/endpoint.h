// What every provider does the same way with its per-VI state (its Endpoint, in
// vi->prov) and with a peer-to-peer connection under way (its P2p, in ep->p2p), written
// once as templates over those two types.
#pragma once

#include "core/arena.h"
#include "core/clock.h"
#include "core/objects.h"

#include <poll.h>

namespace vipl::util {

// VipDestroyVi's provider part: the connection goes (disconnect), then the state, from
// the shared arena when the VI is shareable.
template <class Endpoint>
void destroy_endpoint(Vi *vi, void (*disconnect)(Vi *)) {
    auto *ep = static_cast<Endpoint *>(vi->prov);
    if (!ep) return;
    disconnect(vi);
    ep->~Endpoint();
    object_free(ep, sizeof(Endpoint), vi->shareable);
    vi->prov = nullptr;
}

// One step of VipConnectPeerRequest/Done/Wait: past its deadline the attempt is dropped
// (VIP_TIMEOUT); else the acceptor's or the connector's step runs, and *deadline is the
// attempt's own unless the step wants to be called sooner.
template <class Endpoint, class P2p>
VIP_RETURN peer_step(Vi *vi, VIP_VI_ATTRIBUTES *rattrs, pollfd *fds, int *nfds, uint64_t *deadline,
                     void (*drop)(Endpoint *),
                     VIP_RETURN (*acceptor)(Vi *, Endpoint *, P2p *, VIP_VI_ATTRIBUTES *, pollfd *,
                                            int *, uint64_t *),
                     VIP_RETURN (*connector)(Vi *, Endpoint *, P2p *, VIP_VI_ATTRIBUTES *, pollfd *,
                                             int *, uint64_t *)) {
    auto *ep = static_cast<Endpoint *>(vi->prov);
    P2p *p = ep->p2p;
    *nfds = 0;
    if (!p) return VIP_INVALID_STATE;
    if (now_ns() >= p->deadline) {
        drop(ep);
        return VIP_TIMEOUT;
    }
    *deadline = p->deadline;
    return (p->acceptor ? acceptor : connector)(vi, ep, p, rattrs, fds, nfds, deadline);
}

} // namespace vipl::util
