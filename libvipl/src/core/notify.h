// The notification thread: the only thread the library starts, and only once a
// program registers an error callback or a Notify handler.  It runs those
// handlers (never under a library lock) and watches connected VIs so that a
// dead peer is reported at once.
#pragma once

#include "core/objects.h"

namespace vipl {

// Starts the thread if needed.  VIP_ERROR_RESOURCE if it cannot be created.
VIP_RETURN notifier_start();
bool notifier_running();
// Queues err for the NIC's error handler; false when the NIC has none.
bool notifier_post_error(Nic *nic, const VIP_ERROR_DESCRIPTOR &err);
// Wakes the thread to look at its work again.
void notifier_poke();
// Watches (or stops watching) a connected VI / a CQ with a Notify handler.
void notifier_watch_vi(Vi *vi, bool add);
void notifier_watch_cq(Cq *cq, bool add);
// Stops watching a VI's transport descriptors (about to be closed).
void notifier_forget_fds(Vi *vi, const int *fds, int n);
// In a fork child: the thread does not exist there.
void notifier_forget_after_fork();
void notifier_lock_for_fork();
void notifier_unlock_after_fork();

} // namespace vipl
