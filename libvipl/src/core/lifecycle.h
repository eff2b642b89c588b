// VI and NIC life cycle: connecting, disconnecting, destroying, closing.
#pragma once

#include "core/objects.h"

namespace vipl {

// Marks a VI Connected once its provider finished connecting (vi->lock
// held) and starts watching its transport descriptors.
void vi_connected_locked(Vi *vi);
// Every epoll set of this process forgets the VI's transport copies (lock
// held): none keeps watching a descriptor a fork child may still hold open.
void vi_transport_closing(Vi *vi);
// The provider's transport descriptors and mapping, as this process holds
// them (lock held): vi_drop_copies unwatches and closes them, in every
// holder of a shareable VI (each its own copies), when the transport goes
// away.  Providers never close them themselves.
void vi_hold_fd(Vi *vi, int fd);
void vi_hold_map(Vi *vi, void *p, size_t size);
void vi_hold_aux(Vi *vi, void *aux);
void vi_drop_copies(Vi *vi);
// The provider's transport is gone (lock held, copies dropped): the other
// holders drop theirs at their next call.
void vi_transport_gone(Vi *vi);
// Drops the VI's connection (vi->lock held): provider disconnect, Idle state,
// outstanding descriptors flushed.
void vi_disconnect_locked(Vi *vi);
// Destroys a VI.  Unless force, the VI must be Idle with empty queues.
VIP_RETURN vi_destroy(Vi *vi, const void *handle, bool force);
VIP_RETURN cq_destroy_checked(Cq *cq, const void *handle, bool force);
// VipCloseNic: destroys everything left on the NIC, then the NIC.
void close_nic(Nic *nic, const void *handle);

} // namespace vipl
