// Blocking: spin briefly, then sleep in ppoll until an event, the deadline or
// a signal handler (VIP_INTERRUPTED).
#pragma once

#include "core/objects.h"

#include <poll.h>
#include <sys/epoll.h>

namespace vipl {

enum class PollResult { ready, timeout, interrupted, error };

// ppoll until one of fds is ready, the deadline passes, or a signal handler ran.
PollResult poll_until(pollfd *fds, int nfds, uint64_t deadline);
// What a wait that polls until an earlier wake-up time makes of the outcome:
// VIP_SUCCESS to look again (ready, or woken before deadline), else the
// code to return (VIP_TIMEOUT, VIP_INTERRUPTED, VIP_ERROR_RESOURCE).
VIP_RETURN poll_verdict(PollResult pr, uint64_t deadline);
// The same with epoll_wait on ep; *got events are in evs.
PollResult epoll_until(int ep, struct epoll_event *evs, int max, uint64_t deadline, int *got);

// A provider's own short sleep inside progress (tcp waits briefly for the
// rest of a frame) that a signal handler ended reports it here: the Wait or
// CQWait making the call then returns VIP_INTERRUPTED instead of taking a
// descriptor (a Done ignores it).  Per thread; each wait starts clear.
void note_interrupted();
// A wait starts: no provider sleep of it was interrupted yet.
void wait_begin();
// In a wait: true, and *rc = VIP_INTERRUPTED, once a provider's sleep in it was
// interrupted; the wait then takes nothing (it stays queued for the next call).
bool interrupted(VIP_RETURN *rc);
// Counts a sleeper in (+1) or out (-1); returns the count before.  Only threads of
// this process read a private VI's count: with one thread, no locked instruction.
int sleepers_add(Vi *vi, int d);

// Adds (or removes) a VI's transport descriptors to the epoll set ep with
// the events the provider asks for, plus `extra` (EPOLLET...), tagged data.
void watch_transport(int ep, Vi *vi, uint64_t data, bool add, uint32_t extra = 0);

// The edge-triggered set of a VI's lone sleeper: its doorbell (data 0) and its
// transport's descriptors (data 1).  Created on first use (lock held); false
// if it cannot be.
bool vi_wait_set(Vi *vi);
// Adds the transport's current descriptors to it (after a connection is made).
void vi_wait_set_transport(Vi *vi);
// One sleep of a VI's waiter, without the lock: a lone one in the edge-triggered set
// (vi_wait_set), others in poll on fds[0..n) (the doorbell first, then the transport's
// sleep_fds).  Says whether the doorbell and whether a transport descriptor woke it.
PollResult sleep_on_vi(Vi *vi, bool lone, pollfd *fds, int n, uint64_t deadline, bool *doorbell,
                       bool *transport_event);

// The adaptive spin policy of a VI in this process: what vi_wait spins, and
// what VipViSpinBudget hands a program that waits on its own.
struct SpinPlan {
    uint64_t ns = 0;             // how long to spin; 0: sleep at once
    unsigned yield_every = 0;    // looks between two yields of the CPU; 0: never
    bool peer_cpu_known = false; // the transport told where the peer waits
};
// The spin a waiter may make now with `base_ns` as the full budget (lock held).
SpinPlan spin_plan(Vi *vi, uint64_t base_ns);
// How a spin planned by spin_plan ended: won (the answer came while spinning,
// not only after a yield ran something else) or not (lock held).
void spin_outcome(Vi *vi, bool won);

// VipArmViWaitFd(Ex): the wait fd becomes readable at the VI's next event of `what`
// (WakeFor bits: arrivals, the peer consuming), or at once if one is waiting (lock held).
// `edge`: its waiter watches it edge-triggered, so the doorbell's count is left (no
// read): a ring after the arming is a new edge all the same.
void arm_wait_fd(Vi *vi, unsigned what = kWakeAny, bool edge = false);

// VipSendDone/VipRecvDone on a looked-up VI.
VIP_RETURN vi_done(Vi *vi, const void *handle, bool recv, VIP_DESCRIPTOR **out);
// VipSendWait/VipRecvWait.
VIP_RETURN vi_wait(Vi *vi, const void *handle, bool recv, uint64_t deadline, VIP_DESCRIPTOR **out);
// VipWaitViEvent (wait_vi.cc): sleeps until an event of `what` (WakeFor bits), takes nothing.
VIP_RETURN vi_wait_event(Vi *vi, const void *handle, unsigned what, uint64_t deadline);

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

// Arms a VI so that its next event makes vi->efd readable (lock held);
// vi_disarm withdraws it once nobody waits (not for fd users or Notify).
void vi_arm(Vi *vi, unsigned what = 3 /* kWakeAny */);
void vi_disarm(Vi *vi);
// Drains vi->efd if it may hold a count (a kick, or a ring that consumed the
// last arming), then arms again (lock held).  No system call when idle.  `edge`:
// leaves the count for a waiter that watches the fd edge-triggered (the next
// level-triggered arming drains it: Vi::undrained).
void vi_rearm(Vi *vi, unsigned what = 3 /* kWakeAny */, bool edge = false);

} // namespace vipl
