// Blocking: spin briefly, then sleep in ppoll until an event, the deadline or
// a signal handler (VIP_INTERRUPTED).
#pragma once

#include "core/objects.h"

#include <poll.h>

namespace vipl {

enum class PollResult { ready, timeout, interrupted, error };

// ppoll until one of fds is ready, the deadline passes, or a signal handler ran.
PollResult poll_until(pollfd *fds, int nfds, uint64_t deadline);

// VipSendDone/VipRecvDone on a looked-up VI.
VIP_RETURN vi_done(Vi *vi, const void *handle, bool recv, VIP_DESCRIPTOR **out);
// VipSendWait/VipRecvWait.
VIP_RETURN vi_wait(Vi *vi, const void *handle, bool recv, uint64_t deadline, VIP_DESCRIPTOR **out);

VIP_RETURN cq_done(Cq *cq, const void *handle, VIP_VI_HANDLE *vi, VIP_BOOLEAN *recv);
VIP_RETURN cq_wait(Cq *cq, const void *handle, uint64_t deadline, VIP_VI_HANDLE *vi,
                   VIP_BOOLEAN *recv);

// For a CQ in fd mode: arms every member so the next event wakes the fd,
// and wakes it at once if an entry is already queued.
void cq_rearm_for_fd(Cq *cq);

// Drains what woke a CQ waiter (its doorbell, its members') and runs the
// members' progress.
void cq_handle_wakeups(Cq *cq);
// Re-arms every member of a CQ and runs its progress.
void cq_arm_members(Cq *cq);

// Arms a VI so that its next event makes vi->efd readable (lock held).
void vi_arm(Vi *vi);
// Drains vi->efd if it may hold a count (a kick, or a ring that consumed the
// last arming), then arms again (lock held).  No system call when idle.
void vi_rearm(Vi *vi);

} // namespace vipl
