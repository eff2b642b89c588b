// Shared stubs for operations a provider does not support.
#pragma once

#include "prov/provider.h"

namespace vipl::enosys {

VIP_RETURN ns_by_addr(Nic *, const VIP_NET_ADDRESS *, char *, VIP_ULONG *);
VIP_RETURN autodiscovery(Nic *, VIP_AUTODISCOVERY_LIST *);
VIP_RETURN connect_wait_fd(Nic *, const VIP_NET_ADDRESS *, int *);
VIP_RETURN endpoints(Vi *, VIP_VI_ENDPOINTS *);
VIP_RETURN peer_request(Vi *, const VIP_NET_ADDRESS *, const VIP_NET_ADDRESS *, uint64_t);
VIP_RETURN peer_progress(Vi *, VIP_VI_ATTRIBUTES *, pollfd *, int *, uint64_t *);
int exchange_cpu(Vi *, int);
// For transports whose descriptors become ready by themselves (sockets):
// there is no doorbell to arm, and nothing rings one.
void arm(Vi *, unsigned);
void disarm(Vi *);
bool armed(Vi *);
void drop_aux(Vi *, void *);
void idle(Vi *);

} // namespace vipl::enosys
