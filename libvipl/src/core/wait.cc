#include "core/wait.h"
#include "core/lifecycle.h"

#include "core/clock.h"
#include "core/config.h"
#include "core/cq.h"
#include "core/fds.h"
#include "core/vi.h"
#include "core/vi_guard.h"
#include "prov/provider.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace vipl {

namespace {
// A provider's sleep in this thread's current wait was ended by a signal
// handler (note_interrupted).  Cleared when a wait starts.
thread_local bool t_interrupted __attribute__((tls_model("initial-exec"))) = false;
} // namespace

void note_interrupted() {
    t_interrupted = true;
}

void wait_begin() {
    t_interrupted = false;
}

bool interrupted(VIP_RETURN *rc) {
    if (!t_interrupted) return false;
    *rc = VIP_INTERRUPTED;
    return true;
}

// The loop of every sleep in the kernel: `call` (ppoll, epoll_pwait2) sleeps at
// most the time left, until readiness (its count in *got), the deadline or a signal
// handler; a call the kernel could not start for want of memory is made again.
// errno is left as it was.
template <class Call>
static PollResult sleep_until(uint64_t deadline, Call call, int *got) {
    for (;;) {
        timespec ts;
        timespec *tp = nullptr;
        if (deadline != kNoDeadline) {
            ts = to_timespec(deadline);
            tp = &ts;
        }
        int saved = errno;
        int r = call(tp);
        int err = errno;
        errno = saved;
        if (r > 0) {
            if (got) *got = r;
            return PollResult::ready;
        }
        if (r == 0) return PollResult::timeout;
        if (err == EINTR) return PollResult::interrupted;
        if (err != EAGAIN && err != ENOMEM) return PollResult::error;
    }
}

PollResult poll_until(pollfd *fds, int nfds, uint64_t deadline) {
    return sleep_until(
        deadline, [&](const timespec *tp) { return ppoll(fds, nfds, tp, nullptr); }, nullptr);
}

VIP_RETURN poll_verdict(PollResult pr, uint64_t deadline) {
    switch (pr) {
    case PollResult::ready:
        return VIP_SUCCESS;
    case PollResult::timeout:
        return now_ns() >= deadline ? VIP_TIMEOUT : VIP_SUCCESS;
    case PollResult::interrupted:
        return VIP_INTERRUPTED;
    case PollResult::error:
        break;
    }
    return VIP_ERROR_RESOURCE;
}

namespace {
// epoll_pwait2 came with Linux 5.11: older kernels (a container on such a host) and tools
// that do not know the call (valgrind) answer ENOSYS.  Then epoll_pwait, its timeout in
// milliseconds rounded up (a sleep never ends before its deadline), from then on.
std::atomic<bool> g_no_epoll_pwait2{false};

int epoll_sleep(int ep, epoll_event *evs, int max, const timespec *tp) {
    if (!g_no_epoll_pwait2.load(std::memory_order_relaxed)) {
        int r = epoll_pwait2(ep, evs, max, tp, nullptr);
        if (r >= 0 || errno != ENOSYS) return r;
        g_no_epoll_pwait2.store(true, std::memory_order_relaxed);
    }
    int ms = -1;
    if (tp)
        ms = static_cast<int>(std::min<int64_t>(
            (int64_t{tp->tv_sec} * 1000000000 + tp->tv_nsec + 999999) / 1000000, 1 << 30));
    return epoll_pwait(ep, evs, max, ms, nullptr);
}
} // namespace

PollResult epoll_until(int ep, epoll_event *evs, int max, uint64_t deadline, int *got) {
    *got = 0;
    return sleep_until(
        deadline, [&](const timespec *tp) { return epoll_sleep(ep, evs, max, tp); }, got);
}

void watch_transport(int ep, Vi *vi, uint64_t data, bool add, uint32_t extra) {
    if (ep < 0 || !vi->prov) return;
    pollfd fds[4];
    int n = vi->nic->ops->vi->wait_fds(vi, fds, 4);
    for (int i = 0; i < n; ++i) {
        if (!add) {
            epoll_ctl(ep, EPOLL_CTL_DEL, fds[i].fd, nullptr);
            continue;
        }
        epoll_event ev{};
        ev.events = extra | ((fds[i].events & POLLIN) ? uint32_t(EPOLLIN) : 0u) |
                    ((fds[i].events & POLLOUT) ? uint32_t(EPOLLOUT) : 0u) |
                    ((fds[i].events & POLLRDHUP) ? uint32_t(EPOLLRDHUP) : 0u);
        ev.data.u64 = data;
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i].fd, &ev);
    }
}

bool vi_wait_set(Vi *vi) {
    if (vis().local(vi).wait_ep >= 0) return true;
    int ep = fd_track(epoll_create1(EPOLL_CLOEXEC));
    if (ep < 0) return false;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    ev.data.u64 = 0;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, vi->efd, &ev) < 0) {
        fd_close(ep);
        return false;
    }
    vis().local(vi).wait_ep = ep;
    vi_wait_set_transport(vi);
    return true;
}

void vi_wait_set_transport(Vi *vi) {
    watch_transport(vis().local(vi).wait_ep, vi, 1, true, EPOLLET);
}

void vi_arm(Vi *vi, unsigned what) {
    if (vi->prov) vi->nic->ops->vi->arm(vi, what);
}

// Whether q's CQ counts on its members being armed: a CQ waiter armed them
// (the last VI sleeper leaving must not withdraw that), or a program polls its fd.
static bool cq_needs_arming(const WorkQueue &q) {
    return q.cq && (q.cq->sleepers.load(std::memory_order_seq_cst) > 0 ||
                    q.cq->fd_mode.load(std::memory_order_relaxed));
}

void vi_disarm(Vi *vi) {
    if (vi->prov && !vi->sq.notify && !vi->rq.notify && !cq_needs_arming(vi->sq) &&
        !cq_needs_arming(vi->rq))
        vi->nic->ops->vi->disarm(vi);
}

void vi_rearm(Vi *vi, unsigned what, bool edge) {
    bool rang = vi->prov && !vi->nic->ops->vi->armed(vi);
    if (edge) {
        // The next ring must write the doorbell again (a kick suppresses rings until
        // it is cleared); its count stays, as after an edge-triggered sleep.
        if (rang || vi->kicked.load(std::memory_order_acquire)) vi_doorbell_heard(vi, true);
    } else if (rang || vi->kicked.load(std::memory_order_acquire) ||
               vi->undrained.load(std::memory_order_relaxed)) {
        vi_drain(vi);
    }
    vi_arm(vi, what);
}

__attribute__((always_inline)) static inline bool take(WorkQueue &q, VIP_DESCRIPTOR **out,
                                                       VIP_RETURN *rc) {
    if (q.head == q.visible) return false;
    WqEntry &e = q.at(q.head);
    __atomic_store_n(&q.head, q.head + 1, __ATOMIC_RELAXED);
    *out = e.desc;
    *rc = (e.status & VIP_STATUS_ERROR_MASK) ? VIP_DESCRIPTOR_ERROR : VIP_SUCCESS;
    return true;
}

// After a Done found nothing, a program waiting on the fd must be woken by the next event.
static void rearm_for_fd(Vi *vi, unsigned what = kWakeAny, bool edge = false) {
    // The fd may have been woken by the peer hanging up: act on it soon, not
    // at the next periodic liveness check; that may flush the queues.  At
    // most every 200 us: a program polling the fd calls Done again and again
    // while traffic flows, and the look is a system call.
    // Except for an edge-triggered waiter armed again while its last arming still
    // stands (nobody rang, nothing kicked: it woke without a doorbell, or never slept).
    // A hang-up reaches such a waiter as one edge only (the transport's descriptor
    // stays ready, so its fd makes no new one): found only at a later paced look, it
    // would leave the waiter asleep for ever.
    ViLocal &l = vis().local(vi);
    uint64_t now = coarse_ns();
    bool unrung = edge && vi->prov && vi->nic->ops->vi->armed(vi) &&
                  !vi->kicked.load(std::memory_order_acquire);
    if (vi->prov && (unrung || now >= l.next_peer_look)) {
        l.next_peer_look = now + 200000;
        vi->nic->ops->vi->check_peer(vi);
    }
    vi_rearm(vi, what, edge);
    // Only what it is armed for: a program armed for arrivals may leave its own send
    // completions for later without being woken by them.
    bool takeable = ((what & kWakeSend) && vi->sq.head != vi->sq.visible) ||
                    ((what & kWakeRecv) && vi->rq.head != vi->rq.visible);
    const ViOps *ops = vi->nic->ops->vi;
    // An edge-triggered waiter hears of input that came before the arming only through
    // a ring (a level-triggered one sees the transport's descriptor ready, as on tcp).
    if (takeable || (vi->prov && (edge ? ops->pending(vi) : ops->held(vi)))) {
        vi->kicked.store(false);
        vi_wake(vi);
    }
}

void arm_wait_fd(Vi *vi, unsigned what, bool edge) {
    vi->fd_armed.store(static_cast<uint8_t>(what), std::memory_order_relaxed);
    rearm_for_fd(vi, what, edge);
    // A failure (found just now by the look at the peer, or before) is a state the fd
    // reports until the program has seen it: rearming drained its wake-up.
    if (vi->state.load(std::memory_order_acquire) == VIP_STATE_ERROR) {
        vi->kicked.store(false);
        vi_wake(vi);
    }
}

// Done's work with the lock held: true and *rc when something was taken,
// or (in a wait) when a provider's sleep was interrupted.
static bool done_locked(Vi *vi, WorkQueue &q, VIP_DESCRIPTOR **out, VIP_RETURN *rc,
                        bool wait = false) {
    if (take(q, out, rc)) return true;
    // What this progress completes is taken here: the wait fd hears only of the rest (a
    // CQ's waiters hear of everything, as before).
    bool defer = vi->fd_mode.load(std::memory_order_relaxed) && !vi->sq.cq && !vi->rq.cq;
    vi->taking = defer;
    vi_progress(vi);
    bool got = (wait && interrupted(rc)) || take(q, out, rc);
    if (defer) vi_end_taking(vi);
    if (got) return true;
    if (vi->fd_mode.load(std::memory_order_relaxed) &&
        !vi->fd_explicit.load(std::memory_order_relaxed)) {
        rearm_for_fd(vi);
        if ((wait && interrupted(rc)) || take(q, out, rc)) return true;
    }
    if (vi->prov) vi->nic->ops->vi->idle(vi);
    return false;
}

VIP_RETURN vi_done(Vi *vi, const void *handle, bool recv, VIP_DESCRIPTOR **out) {
    ViGuard g(vi);
    if (!vis().still(vi, handle)) return VIP_INVALID_PARAMETER;
    VIP_RETURN rc;
    return done_locked(vi, recv ? vi->rq : vi->sq, out, &rc) ? rc : VIP_NOT_DONE;
}

int sleepers_add(Vi *vi, int d) {
    if (!vi->shareable && Mutex::single_threaded()) {
        int v = vi->sleepers.load(std::memory_order_relaxed);
        vi->sleepers.store(v + d, std::memory_order_relaxed);
        return v;
    }
    return vi->sleepers.fetch_add(d, std::memory_order_seq_cst);
}

// Whether a lone sleeper may sleep in the transport's own read (provider.h):
// nothing else must need to wake it (a CQ, a notify handler, a wait fd), and
// only this process reads the transport.
static bool direct_allowed(Vi *vi) {
    return vi->prov && vi->nic->ops->vi->direct_begin && !vi->shareable && !vi->sq.cq &&
           !vi->rq.cq && !vi->sq.notify && !vi->rq.notify &&
           !vi->fd_mode.load(std::memory_order_relaxed);
}

PollResult sleep_on_vi(Vi *vi, bool lone, pollfd *fds, int n, uint64_t deadline, bool *doorbell,
                       bool *transport_event) {
    *doorbell = *transport_event = false;
    if (lone) {
        epoll_event evs[4];
        int got = 0;
        PollResult pr = epoll_until(vis().local(vi).wait_ep, evs, 4, deadline, &got);
        for (int i = 0; i < got; ++i) *(evs[i].data.u64 ? transport_event : doorbell) = true;
        return pr;
    }
    PollResult pr = poll_until(fds, n, deadline);
    *doorbell = fds[0].revents & POLLIN;
    for (int i = 1; i < n; ++i) *transport_event |= fds[i].revents != 0;
    return pr;
}

namespace {

// One VipSendWait/VipRecvWait, in its phases: the first look, the spin, then sleeps
// (each after arming and a last look) in the transport's own read or in (e)poll, until
// something is taken, the deadline passes or a signal handler runs.
class ViWait {
public:
    ViWait(Vi *vi, const void *handle, bool recv, uint64_t deadline, VIP_DESCRIPTOR **out)
        : vi_(vi), handle_(handle), q_(recv ? vi->rq : vi->sq), recv_(recv), deadline_(deadline),
          out_(out) {}

    // Each phase returns true once the call is over, its result in rc().
    bool first_look();
    bool spin();
    bool sleep();
    VIP_RETURN rc() const { return rc_; }

private:
    // What a sleep is to be: set up under the lock by prepare().
    struct Sleep {
        bool lone = false;   // alone on the VI: edge-triggered epoll set
        bool direct = false; // in the transport's own read (provider.h)
        ViOps::DirectSleep ds{};
        pollfd fds[5];
        int n = 0;
    };
    bool prepare(Sleep &s);
    bool sleep_direct(const Sleep &s);
    bool sleep_polled(Sleep &s);
    bool invalid() {
        rc_ = VIP_INVALID_PARAMETER;
        return true;
    }

    Vi *vi_;
    const void *handle_;
    WorkQueue &q_;
    bool recv_;
    uint64_t deadline_;
    VIP_DESCRIPTOR **out_;
    VIP_RETURN rc_ = VIP_SUCCESS;
    // Level-triggered readiness: what is already there makes the first poll return at
    // once, so no progress (a system call) is needed before it.
    bool level_ = false;
    // Without spinning, the first look's lock goes on to the first sleep's.
    bool held_ = false;
    SpinPlan plan_;
};

bool ViWait::first_look() {
    ViGuard g(vi_);
    if (!vis().still(vi_, handle_)) return invalid();
    level_ = !(vi_->nic->ops->vi->wait_caps & kCapEdge);
    if (level_ ? take(q_, out_, &rc_) : done_locked(vi_, q_, out_, &rc_, true)) return true;
    plan_ = spin_plan(vi_, static_cast<uint64_t>(config().spin_us) * 1000);
    if (!plan_.ns) {
        g.release();
        held_ = true;
    }
    return false;
}

bool ViWait::spin() {
    if (!plan_.ns) return false;
    uint64_t end = std::min(now_ns() + plan_.ns, deadline_);
    const ViOps *ops = vi_->nic->ops->vi;
    bool by_progress = ops->wait_caps & kCapSpinByProgress;
    // If something did run in the last yield (it took a while), an answer that came
    // after it proves nothing for spinning.
    unsigned yield_every = plan_.yield_every;
    bool yielded = false;
    for (unsigned i = 0;; ++i) {
        // One lock per look: the transport may be torn down by another thread.
        if (vi_->lock.try_lock()) {
            bool got = false;
            if (!vis().still(vi_, handle_)) {
                vi_->lock.unlock();
                return invalid();
            }
            if (q_.head != q_.visible || (vi_->prov && (by_progress || ops->pending(vi_)))) {
                if (q_.head == q_.visible) vi_progress(vi_);
                if (interrupted(&rc_)) {
                    vi_->lock.unlock();
                    return true;
                }
                got = take(q_, out_, &rc_);
            }
            if (got) {
                ++vi_->counters.SpinWins;
                spin_outcome(vi_, !yielded);
            }
            vi_->lock.unlock();
            if (got) return true;
        }
        cpu_relax();
        if ((i & 63) == 63 && now_ns() >= end) break;
        if (yield_every && i % yield_every == yield_every - 1) {
            uint64_t before = now_ns();
            sched_yield();
            yielded = now_ns() - before > 2000;
        }
    }
    ViGuard g(vi_);
    if (vis().still(vi_, handle_)) spin_outcome(vi_, false); // a win returned above
    return false;
}

// Arms the VI and looks a last time; how to sleep (lock held meanwhile).
bool ViWait::prepare(Sleep &s) {
    // A lone sleeper waits edge-triggered in epoll_wait: no need to drain the doorbell
    // afterwards, so a wake-up costs one system call on each side.  Further sleepers
    // poll the doorbell level-triggered and drain it.
    s.lone = sleepers_add(vi_, 1) == 0;
    // A lock held since the first look needs no second look at the handle.
    ViGuard g = held_ ? ViGuard(vi_, std::adopt_lock) : ViGuard(vi_);
    if (!held_ && !vis().still(vi_, handle_)) {
        sleepers_add(vi_, -1);
        return invalid();
    }
    held_ = false;
    const ViOps *ops = vi_->nic->ops->vi;
    // A receive waits for arrivals only: the peer consuming our own messages must not
    // wake it (a ping-pong would sleep twice per message).
    vi_arm(vi_, recv_ && !vi_->fd_mode.load(std::memory_order_relaxed) && vi_->sleepers.load() == 1
                    ? kWakeRecv
                    : kWakeAny);
    // A transport with level-triggered readiness needs no look between arming and
    // sleeping: whatever arrives meanwhile keeps its descriptor ready.  The look before
    // (Done, spinning, the last wake-up) suffices.
    if (!level_) vi_progress(vi_);
    if (vi_->prov) ops->idle(vi_);
    if (interrupted(&rc_) || take(q_, out_, &rc_)) {
        if (sleepers_add(vi_, -1) == 1) vi_disarm(vi_);
        return true;
    }
    if (s.lone && level_ && direct_allowed(vi_) && ops->direct_begin(vi_, &s.ds)) {
        // The bounded recv() must not overshoot the deadline.
        s.direct = deadline_ == kNoDeadline || deadline_ > now_ns() + s.ds.slice_ns;
        if (!s.direct) ops->direct_end(vi_, s.ds, -1, EAGAIN);
    }
    if (s.lone && (level_ || !vi_wait_set(vi_))) s.lone = false;
    if (!s.lone && !s.direct) {
        s.fds[s.n++] = pollfd{vi_->efd, POLLIN, 0};
        if (vi_->prov) s.n += ops->sleep_fds(vi_, s.fds + s.n, 4);
    }
    ++vi_->counters.Sleeps; // under the lock: VipQueryViCounters reads it
    return false;
}

// Sleeps in the transport's own bounded read of the next message.
bool ViWait::sleep_direct(const Sleep &s) {
    int saved = errno;
    ssize_t got = ::recv(s.ds.fd, s.ds.buf, s.ds.len, 0);
    int err = errno;
    errno = saved;
    __atomic_store_n(s.ds.state, 2, __ATOMIC_RELEASE);
    bool last = sleepers_add(vi_, -1) == 1;
    ViGuard g(vi_);
    if (!vis().still(vi_, handle_)) return invalid();
    if (last && !vi_->fd_mode.load(std::memory_order_relaxed)) vi_disarm(vi_);
    vi_->nic->ops->vi->direct_end(vi_, s.ds, got, err);
    vi_progress(vi_);
    if (got < 0 && err == EINTR) {
        rc_ = VIP_INTERRUPTED;
        return true;
    }
    if (interrupted(&rc_) || take(q_, out_, &rc_)) return true;
    if (deadline_ != kNoDeadline && now_ns() >= deadline_) {
        rc_ = VIP_TIMEOUT;
        return true;
    }
    return false;
}

// Sleeps on the doorbell and the transport's descriptors.
bool ViWait::sleep_polled(Sleep &s) {
    bool doorbell = false, transport_event = false;
    PollResult pr = sleep_on_vi(vi_, s.lone, s.fds, s.n, deadline_, &doorbell, &transport_event);
    bool last = sleepers_add(vi_, -1) == 1;
    {
        ViGuard g(vi_);
        if (!vis().still(vi_, handle_)) return invalid();
        if (last && !vi_->fd_mode.load(std::memory_order_relaxed)) vi_disarm(vi_);
        if (doorbell) vi_doorbell_heard(vi_, s.lone);
        if (transport_event && vi_->prov) vi_->nic->ops->vi->check_peer(vi_);
        // Interrupted or not, what arrived meanwhile is queued here ...
        vi_progress(vi_);
        // ... but a handler's run ends the call: the next one takes it.
        if (pr == PollResult::interrupted) {
            rc_ = VIP_INTERRUPTED;
            return true;
        }
        if (interrupted(&rc_) || take(q_, out_, &rc_)) return true;
    }
    if (pr == PollResult::timeout || (deadline_ != kNoDeadline && now_ns() >= deadline_)) {
        rc_ = VIP_TIMEOUT;
        return true;
    }
    if (pr == PollResult::error) {
        rc_ = VIP_ERROR_RESOURCE;
        return true;
    }
    return false;
}

bool ViWait::sleep() {
    for (;;) {
        Sleep s;
        if (prepare(s)) return true;
        if (s.direct ? sleep_direct(s) : sleep_polled(s)) return true;
    }
}

} // namespace

VIP_RETURN vi_wait(Vi *vi, const void *handle, bool recv, uint64_t deadline, VIP_DESCRIPTOR **out) {
    wait_begin();
    ViWait w(vi, handle, recv, deadline, out);
    if (w.first_look() || w.spin() || w.sleep()) return w.rc();
    return VIP_ERROR_RESOURCE; // not reached: sleep() ends the call
}

// ------------------------------------------------------------------- CQs

// Members are copied out under the CQ's lock and visited without it: the
// lock order is VI before CQ.  VI objects are type-stable, so a member that
// went away meanwhile is recognised under its own lock.
static thread_local std::vector<Vi *> t_members;

// A member's doorbell (vi->efd) is in the CQ's set edge-triggered and the
// CQ side never drains it: a count there may be a wake-up meant for a
// sleeper on the VI itself (a lone one waits for its edge), which a drain
// here would take away.  Arming is enough.
static void progress_members(Cq *cq, bool arm) {
    std::vector<Vi *> &members = t_members;
    cq_members(cq, members);
    for (Vi *vi : members) {
        ViGuard g(vi);
        if (!vis().alive(vi) || !vi->usable_here()) continue;
        if (arm) vi_arm(vi);
        vi_progress(vi);
        if (arm && vi->prov) vi->nic->ops->vi->idle(vi);
    }
}

// CQ callers that found nothing: the members' held-back traffic goes out.
static void idle_members(Cq *cq) {
    std::vector<Vi *> &members = t_members;
    cq_members(cq, members);
    for (Vi *vi : members) {
        ViGuard g(vi);
        if (vis().alive(vi) && vi->usable_here() && vi->prov) vi->nic->ops->vi->idle(vi);
    }
}

static bool cq_take(Cq *cq, VIP_VI_HANDLE *vi, VIP_BOOLEAN *recv) {
    CqEntry e;
    if (!cq_pop(cq, &e)) return false;
    *vi = e.vi;
    *recv = e.recv;
    return true;
}

void cq_arm_members(Cq *cq) {
    progress_members(cq, true);
}

void cq_rearm_for_fd(Cq *cq) {
    cq_drain(cq);
    // Members' doorbell edges already reported would keep the fd readable.
    cq_handle_wakeups(cq);
    progress_members(cq, true);
    bool nonempty;
    {
        std::lock_guard<Mutex> g(cq->lock);
        nonempty = cq->head != cq->tail;
    }
    if (nonempty) cq_wake(cq);
}

// CQDone's work; in a wait, VIP_INTERRUPTED once a provider's sleep was interrupted.
static VIP_RETURN cq_look(Cq *cq, const void *handle, VIP_VI_HANDLE *vi, VIP_BOOLEAN *recv,
                          bool wait) {
    if (!cqs().still(cq, handle)) return VIP_INVALID_PARAMETER;
    if (cq_take(cq, vi, recv)) return VIP_SUCCESS;
    progress_members(cq, false);
    VIP_RETURN rc;
    if (wait && interrupted(&rc)) return rc;
    if (cq_take(cq, vi, recv)) return VIP_SUCCESS;
    if (cq->fd_mode.load(std::memory_order_relaxed)) cq_rearm_for_fd(cq);
    idle_members(cq);
    return VIP_NOT_DONE;
}

VIP_RETURN cq_done(Cq *cq, const void *handle, VIP_VI_HANDLE *vi, VIP_BOOLEAN *recv) {
    InUse in_use(cq->users);
    return cq_look(cq, handle, vi, recv, false);
}

static bool members_pending(Cq *cq) {
    std::vector<Vi *> &members = t_members;
    {
        std::lock_guard<Mutex> g(cq->lock);
        if (cq->head != cq->tail) return true;
        members.assign(cq->members, cq->members + cq->nmembers);
    }
    for (Vi *vi : members) {
        if (!vi->lock.try_lock()) return true;
        bool p = vis().alive(vi) && vi->usable_here() && vi->prov && vi->nic->ops->vi->pending(vi);
        vi->lock.unlock();
        if (p) return true;
    }
    return false;
}

// Takes what woke us: the CQ's own doorbell (drained) and its members'
// events (edges, reported once: their doorbells are left alone), whose VIs
// progress.
void cq_handle_wakeups(Cq *cq) {
    epoll_event evs[64];
    int n = epoll_wait(cq->epfd, evs, 64, 0);
    for (int i = 0; i < n; ++i) {
        if (evs[i].data.u64 == 0) {
            cq_drain(cq);
            continue;
        }
        Vi *vi = vis().lookup(reinterpret_cast<void *>(evs[i].data.u64));
        if (!vi) continue;
        ViGuard g(vi);
        if (!vis().alive(vi)) continue;
        if (vi->prov) vi->nic->ops->vi->check_peer(vi);
        vi_progress(vi);
    }
}

VIP_RETURN cq_wait(Cq *cq, const void *handle, uint64_t deadline, VIP_VI_HANDLE *vi,
                   VIP_BOOLEAN *recv) {
    InUse in_use(cq->users);
    t_interrupted = false;
    VIP_RETURN rc = cq_look(cq, handle, vi, recv, true);
    if (rc != VIP_NOT_DONE) return rc;

    uint64_t budget = static_cast<uint64_t>(config().spin_us) * 1000;
    if (budget) {
        uint64_t end = now_ns() + budget;
        if (deadline < end) end = deadline;
        for (unsigned i = 0;; ++i) {
            if (members_pending(cq)) {
                rc = cq_look(cq, handle, vi, recv, true);
                if (rc != VIP_NOT_DONE) return rc;
            }
            cpu_relax();
            if ((i & 63) == 63 && now_ns() >= end) break;
        }
    }

    for (;;) {
        cq->sleepers.fetch_add(1, std::memory_order_seq_cst);
        progress_members(cq, true);
        if (interrupted(&rc)) {
            cq->sleepers.fetch_sub(1);
            return rc;
        }
        if (cq_take(cq, vi, recv)) {
            cq->sleepers.fetch_sub(1);
            return VIP_SUCCESS;
        }
        pollfd fd{cq->epfd, POLLIN, 0};
        PollResult pr = poll_until(&fd, 1, deadline);
        cq->sleepers.fetch_sub(1, std::memory_order_seq_cst);
        if (!cqs().still(cq, handle)) return VIP_INVALID_PARAMETER;
        // Interrupted or not, what arrived meanwhile reaches the CQ here ...
        cq_handle_wakeups(cq);
        // ... but a handler's run ends the call: the next one takes it.
        if (pr == PollResult::interrupted || interrupted(&rc)) return VIP_INTERRUPTED;
        if (cq_take(cq, vi, recv)) return VIP_SUCCESS;
        if (pr == PollResult::timeout || (deadline != kNoDeadline && now_ns() >= deadline))
            return VIP_TIMEOUT;
        if (pr == PollResult::error) return VIP_ERROR_RESOURCE;
    }
}

} // namespace vipl
