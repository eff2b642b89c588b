#include "prov/enosys.h"

namespace vipl::enosys {

VIP_RETURN ns_by_addr(Nic *, const VIP_NET_ADDRESS *, char *, VIP_ULONG *) {
    return VIP_ERROR_NOT_SUPPORTED;
}
VIP_RETURN autodiscovery(Nic *, VIP_AUTODISCOVERY_LIST *) {
    return VIP_ERROR_NOT_SUPPORTED;
}
VIP_RETURN connect_wait_fd(Nic *, const VIP_NET_ADDRESS *, int *) {
    return VIP_ERROR_NOT_SUPPORTED;
}
VIP_RETURN endpoints(Vi *, VIP_VI_ENDPOINTS *) {
    return VIP_ERROR_NOT_SUPPORTED;
}
VIP_RETURN peer_request(Vi *, const VIP_NET_ADDRESS *, const VIP_NET_ADDRESS *, uint64_t) {
    return VIP_ERROR_NOT_SUPPORTED;
}
VIP_RETURN peer_progress(Vi *, VIP_VI_ATTRIBUTES *, pollfd *, int *, uint64_t *) {
    return VIP_ERROR_NOT_SUPPORTED;
}
int exchange_cpu(Vi *, int) {
    return -1;
}
void arm(Vi *, unsigned) {}
void disarm(Vi *) {}
bool armed(Vi *) {
    return true;
}
void drop_aux(Vi *, void *) {}
void idle(Vi *) {}

} // namespace vipl::enosys
