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

// Arms a VI so that its next event makes vi->efd readable (lock held).
void vi_arm(Vi *vi);

} // namespace vipl
