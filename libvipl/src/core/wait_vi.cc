// VipWaitViEvent: the sleep of a program that takes its completions itself (with Done)
// and only needs the library to wait for the VI's next event.  Polling the VI's wait fd
// after VipArmViWaitFd does the same, but the fd is level-triggered: every arming after a
// wake-up drains the doorbell, a system call per message.  Here a lone sleeper waits
// edge-triggered (the set VipRecvWait's lone sleeper uses), so a wake-up costs one system
// call on each side, and the count it leaves is drained only if a poller of the fd
// arms next.
#include "core/clock.h"
#include "core/vi.h"
#include "core/vi_guard.h"
#include "core/wait.h"
#include "prov/provider.h"

namespace vipl {

// Whether the program has something to act on now: a completion of a kind in `what`
// to take, input the transport holds that its descriptors no longer show, or a VI that
// left the Connected state (lock held).
static bool has_event(Vi *vi, unsigned what) {
    if (((what & kWakeSend) && vi->sq.head != vi->sq.visible) ||
        ((what & kWakeRecv) && vi->rq.head != vi->rq.visible))
        return true;
    if (vi->state.load(std::memory_order_acquire) != VIP_STATE_CONNECTED) return true;
    return vi->prov && vi->nic->ops->vi->held(vi);
}

namespace {

// What a sleep is to be, set up under the lock.
struct EventSleep {
    bool lone = false; // alone on the VI: the edge-triggered set
    pollfd fds[5];
    int n = 0;
};

// A sleeper counted in leaves without sleeping: the last one withdraws the arming,
// unless the wait fd or a Notify still counts on it (lock held).
void leave(Vi *vi) {
    if (sleepers_add(vi, -1) == 1 && !vi->fd_mode.load(std::memory_order_relaxed)) vi_disarm(vi);
}

} // namespace

VIP_RETURN vi_wait_event(Vi *vi, const void *handle, unsigned what, uint64_t deadline) {
    wait_begin();
    EventSleep s;
    {
        // Counted in before the arming: a completion this process makes from now on
        // rings the doorbell (vi_wake).
        s.lone = sleepers_add(vi, 1) == 0;
        ViGuard g(vi);
        if (!vis().still(vi, handle)) {
            sleepers_add(vi, -1);
            return VIP_INVALID_PARAMETER;
        }
        const ViOps *ops = vi->nic->ops->vi;
        bool level = !(ops->wait_caps & kCapEdge);
        // The arming a wait fd in the explicit mode keeps is this one too: left as it was
        // (for anything, say), this thread's own sends completing would ring the doorbell
        // while it is awake, and end its next sleep at once (on tcp, every message).
        if (vi->fd_explicit.load(std::memory_order_relaxed))
            vi->fd_armed.store(static_cast<uint8_t>(what), std::memory_order_relaxed);
        vi_arm(vi, what);
        // After the arming, a last look: what came before it rang nobody.  A transport
        // with level-triggered readiness keeps its descriptors ready instead.
        if (!level) vi_progress(vi);
        if (vi->prov) ops->idle(vi);
        VIP_RETURN rc;
        if (interrupted(&rc)) {
            leave(vi);
            return rc;
        }
        if (has_event(vi, what)) {
            leave(vi);
            return VIP_SUCCESS;
        }
        if (s.lone && (level || !vi_wait_set(vi))) s.lone = false;
        if (!s.lone) {
            s.fds[s.n++] = pollfd{vi->efd, POLLIN, 0};
            if (vi->prov) s.n += ops->sleep_fds(vi, s.fds + s.n, 4);
        }
        ++vi->counters.Sleeps; // under the lock: VipQueryViCounters reads it
    }
    bool doorbell, transport_event;
    PollResult pr = sleep_on_vi(vi, s.lone, s.fds, s.n, deadline, &doorbell, &transport_event);
    // Counted out before the lock: destroying the VI waits for its sleepers to leave.
    bool last = sleepers_add(vi, -1) == 1;
    ViGuard g(vi);
    if (!vis().still(vi, handle)) return VIP_INVALID_PARAMETER;
    if (last && !vi->fd_mode.load(std::memory_order_relaxed)) vi_disarm(vi);
    if (doorbell) {
        vi_doorbell_heard(vi, s.lone);
        // A drain takes the wake-up from the other sleepers too, the edge-triggered one
        // included (epoll reports an edge only while the count is there), and nothing
        // here makes a completion that would ring again: pass it on.
        if (!s.lone && !last) {
            vi->kicked.store(false, std::memory_order_relaxed);
            vi_wake_now(vi);
        }
    }
    // The transport's descriptors woke us: a hang-up is seen now, not at the next
    // periodic check.  What arrived is the caller's Done's to progress and take.
    if (transport_event && vi->prov) vi->nic->ops->vi->check_peer(vi);
    switch (pr) {
    case PollResult::ready:
        return VIP_SUCCESS;
    case PollResult::timeout:
        return VIP_TIMEOUT;
    case PollResult::interrupted:
        return VIP_INTERRUPTED;
    case PollResult::error:
        break;
    }
    return VIP_ERROR_RESOURCE;
}

} // namespace vipl
