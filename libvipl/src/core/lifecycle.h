// VI and NIC life cycle: connecting, disconnecting, destroying, closing.
#pragma once

#include "core/objects.h"

namespace vipl {

// Marks a VI Connected once its provider finished connecting (vi->lock
// held) and starts watching its transport descriptors.
void vi_connected_locked(Vi *vi);
// Drops the VI's connection (vi->lock held): provider disconnect, Idle state,
// outstanding descriptors flushed.
void vi_disconnect_locked(Vi *vi);
// Destroys a VI.  Unless force, the VI must be Idle with empty queues.
VIP_RETURN vi_destroy(Vi *vi, const void *handle, bool force);
VIP_RETURN cq_destroy_checked(Cq *cq, const void *handle, bool force);
// VipCloseNic: destroys everything left on the NIC, then the NIC.
void close_nic(Nic *nic, const void *handle);

} // namespace vipl
