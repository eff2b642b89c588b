#include "core/wait.h"
#include "core/lifecycle.h"

#include "core/clock.h"
#include "core/config.h"
#include "core/cq.h"
#include "core/fds.h"
#include "core/vi.h"
#include "prov/provider.h"

#include <algorithm>
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

// In a wait: true, and *rc = VIP_INTERRUPTED, once a provider's sleep in it
// was interrupted; the wait then takes nothing (it stays queued for the next call).
static bool interrupted(VIP_RETURN *rc) {
    if (!t_interrupted) return false;
    *rc = VIP_INTERRUPTED;
    return true;
}

PollResult poll_until(pollfd *fds, int nfds, uint64_t deadline) {
    for (;;) {
        timespec ts;
        timespec *tp = nullptr;
        if (deadline != kNoDeadline) {
            ts = to_timespec(deadline);
            tp = &ts;
        }
        int saved = errno;
        int r = ppoll(fds, nfds, tp, nullptr);
        int err = errno;
        errno = saved;
        if (r > 0) return PollResult::ready;
        if (r == 0) return PollResult::timeout;
        if (err == EINTR) return PollResult::interrupted;
        if (err != EAGAIN && err != ENOMEM) return PollResult::error;
    }
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

PollResult epoll_until(int ep, epoll_event *evs, int max, uint64_t deadline, int *got) {
    *got = 0;
    for (;;) {
        timespec ts;
        timespec *tp = nullptr;
        if (deadline != kNoDeadline) {
            ts = to_timespec(deadline);
            tp = &ts;
        }
        int saved = errno;
        int r = epoll_pwait2(ep, evs, max, tp, nullptr);
        int err = errno;
        errno = saved;
        if (r > 0) {
            *got = r;
            return PollResult::ready;
        }
        if (r == 0) return PollResult::timeout;
        if (err == EINTR) return PollResult::interrupted;
        if (err != EAGAIN && err != ENOMEM) return PollResult::error;
    }
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

void vi_rearm(Vi *vi, unsigned what) {
    bool rang = vi->prov && !vi->nic->ops->vi->armed(vi);
    if (rang || vi->kicked.load(std::memory_order_acquire)) vi_drain(vi);
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
static void rearm_for_fd(Vi *vi, unsigned what = kWakeAny) {
    // The fd may have been woken by the peer hanging up: act on it soon, not
    // at the next periodic liveness check; that may flush the queues.  At
    // most every 200 us: a program polling the fd calls Done again and again
    // while traffic flows, and the look is a system call.
    ViLocal &l = vis().local(vi);
    uint64_t now = coarse_ns();
    if (vi->prov && now >= l.next_peer_look) {
        l.next_peer_look = now + 200000;
        vi->nic->ops->vi->check_peer(vi);
    }
    vi_rearm(vi, what);
    bool takeable = vi->sq.head != vi->sq.visible || vi->rq.head != vi->rq.visible;
    if (takeable || (vi->prov && vi->nic->ops->vi->pending(vi))) {
        vi->kicked.store(false);
        vi_wake(vi);
    }
}

void arm_wait_fd(Vi *vi, unsigned what) {
    vi->fd_armed.store(true, std::memory_order_relaxed);
    rearm_for_fd(vi, what);
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
    vi_progress(vi);
    if ((wait && interrupted(rc)) || take(q, out, rc)) return true;
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

// One wait in 32 on average, at random: two peers that wait in step must
// not probe at fixed, different moments for ever.
static bool probe_now() {
    static thread_local uint32_t t_rng __attribute__((tls_model("initial-exec"))) = 0;
    uint32_t x = t_rng ? t_rng : static_cast<uint32_t>(now_ns()) | 1u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    t_rng = x;
    return (x & 31) == 0;
}

// Whether other tasks wait for this thread's CPU: more than a tenth of the
// time since the last look went by runnable but not running (the run delay of
// /proc/thread-self/schedstat), looked at every 2 ms at most (the look costs
// three system calls).  A spinner there takes the CPU from work that would
// run in its place (a database node with more processes than CPUs): spin_plan
// then gives no longer spin for a peer at work.  No /proc: never.
static bool cpu_contended() {
    struct Look {
        uint64_t next = 0, at = 0, delay = 0;
        bool busy = false;
    };
    static thread_local Look t_look __attribute__((tls_model("initial-exec")));
    Look &l = t_look;
    // The coarse clock (a tick of 1-4 ms) is enough to pace the looks and costs less.
    uint64_t now = coarse_ns();
    if (now < l.next) return l.busy;
    l.next = now + 2'000'000;
    int saved = errno;
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    char buf[96];
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    errno = saved;
    unsigned long long run = 0, delay = 0;
    if (n <= 0) return l.busy = false;
    buf[n] = 0;
    if (sscanf(buf, "%llu %llu", &run, &delay) != 2) return l.busy = false;
    l.busy = l.at && delay > l.delay && (delay - l.delay) * 10 > now - l.at;
    l.at = now;
    l.delay = delay;
    return l.busy;
}

// How long to spin before sleeping.  None when the peer waits on this very
// CPU (it could not run to answer).  Spinning that keeps failing shrinks
// (the peer answers slower than the budget, or shares the CPU unseen; not a
// peer at work on the VI, below): the
// budget halves per miss, down to nothing after 10.  Then a probe now and
// then spins four times the budget: long enough to outlast the wake-up of a
// peer that sleeps too, so that two peers that both stopped spinning find
// their way back (a win restores the full budget).  Where the peer waits is
// unknown, the CPU goes to it every few looks in case it shares ours: every
// 16th when a look is a system call, else every 64th.  Called with the VI's
// lock held.
SpinPlan spin_plan(Vi *vi, uint64_t base_ns) {
    SpinPlan plan;
    uint64_t ns = base_ns;
    const ViOps *ops = vi->nic->ops->vi;
    if (!ns || !(ops->wait_caps & kCapSpin)) return plan;
    int me = sched_getcpu();
    int peer = -1;
    if (vi->prov) peer = ops->exchange_cpu(vi, me);
    ViLocal &l = vis().local(vi);
    plan.peer_cpu_known = peer >= 0;
    l.planned_handoff = peer >= 0 && peer == me;
    if (l.planned_handoff) {
        // A peer on this CPU is answered by handing it the CPU, whatever spinning
        // taught; unless hand-offs keep running nobody: the peer sleeps, or the
        // scheduler keeps the CPU here (a peer in another session's autogroup, as a
        // PostgreSQL backend is).  Then a probe now and then.
        if (l.handoff_misses >= kHandoffMissesMax && !probe_now()) plan.peer_cpu_known = false;
        return plan;
    }
    // While other tasks wait for this CPU, a peer at work earns no longer spin (below):
    // a caller whose peer takes longer than the budget leaves the CPU to the tasks
    // waiting for it.  Spins that win go on (a server whose next request comes within
    // the budget: no wake-up to pay), spins that miss shrink as anywhere.
    bool contended = config().spin_contended && cpu_contended();
    // A peer at work on the connection (not asleep on it) answers or gives room soon: a
    // reader copying out what a writer waits to add to, a server working on a request.
    // Four times the budget, whatever single misses taught: a sleep and a wake-up across
    // cores cost more than that on many hosts, and a request that took longer once says
    // little about the next (ski rental: spinning as long as a sleep costs never costs
    // more than twice the best).  Unless its spins keep missing: a peer at work on
    // something else (a server's client between two requests) is spun for as any other.
    // A peer asleep on the connection waits for us.
    l.planned_busy = vi->prov && ops->peer_busy(vi);
    if (l.planned_busy && l.busy_misses < kBusyMissesMax && !contended) {
        ns *= kBusyPeerFactor;
    } else if (l.spin_misses >= kSpinMissesMax) {
        if (!probe_now()) return SpinPlan{};
        ns *= 4;
    } else {
        ns >>= l.spin_misses;
    }
    plan.ns = ns;
    plan.yield_every = plan.peer_cpu_known ? 0 : (ops->wait_caps & kCapSpinByProgress) ? 16 : 64;
    return plan;
}

void spin_outcome(Vi *vi, bool won) {
    ViLocal &l = vis().local(vi);
    if (l.planned_handoff) {
        if (won)
            l.handoff_misses = 0;
        else if (l.handoff_misses < kHandoffMissesMax)
            ++l.handoff_misses;
        return;
    }
    if (won) {
        l.spin_misses = 0;
        l.busy_misses = 0;
        return;
    }
    if (l.planned_busy && l.busy_misses < kBusyMissesMax) ++l.busy_misses;
    if (l.spin_misses < kSpinMissesMax) ++l.spin_misses;
}

// Counts a sleeper in (+1) or out (-1); returns the count before.  Only
// threads of this process read a private VI's count: with one thread, no
// locked instruction.
static int sleepers_add(Vi *vi, int d) {
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

VIP_RETURN vi_wait(Vi *vi, const void *handle, bool recv, uint64_t deadline, VIP_DESCRIPTOR **out) {
    WorkQueue &q = recv ? vi->rq : vi->sq;
    VIP_RETURN rc;
    bool level;
    SpinPlan plan;
    // Without spinning, the first look's lock goes on to the first sleep's.
    bool held = false;
    t_interrupted = false;
    {
        ViGuard g(vi);
        if (!vis().still(vi, handle)) return VIP_INVALID_PARAMETER;
        // Level-triggered readiness: what is already there makes the first
        // poll return at once, so no progress (a system call) is needed before it.
        level = !(vi->nic->ops->vi->wait_caps & kCapEdge);
        if (level ? take(q, out, &rc) : done_locked(vi, q, out, &rc, true)) return rc;
        plan = spin_plan(vi, static_cast<uint64_t>(config().spin_us) * 1000);
        if (!plan.ns) {
            g.release();
            held = true;
        }
    }

    if (plan.ns) {
        uint64_t end = now_ns() + plan.ns;
        if (deadline < end) end = deadline;
        const ViOps *ops = vi->nic->ops->vi;
        bool by_progress = ops->wait_caps & kCapSpinByProgress;
        // If something did run in the last yield (it took a while), an answer
        // that came after it proves nothing for spinning.
        unsigned yield_every = plan.yield_every;
        bool yielded = false;
        for (unsigned i = 0;; ++i) {
            // One lock per look: the transport may be torn down by another thread.
            if (vi->lock.try_lock()) {
                bool got = false;
                if (!vis().still(vi, handle)) {
                    vi->lock.unlock();
                    return VIP_INVALID_PARAMETER;
                }
                if (q.head != q.visible || (vi->prov && (by_progress || ops->pending(vi)))) {
                    if (q.head == q.visible) vi_progress(vi);
                    if (interrupted(&rc)) {
                        vi->lock.unlock();
                        return rc;
                    }
                    got = take(q, out, &rc);
                }
                if (got) {
                    ++vi->counters.SpinWins;
                    spin_outcome(vi, !yielded);
                }
                vi->lock.unlock();
                if (got) return rc;
            }
            cpu_relax();
            if ((i & 63) == 63 && now_ns() >= end) break;
            if (yield_every && i % yield_every == yield_every - 1) {
                uint64_t before = now_ns();
                sched_yield();
                yielded = now_ns() - before > 2000;
            }
        }
        ViGuard g(vi);
        if (vis().still(vi, handle)) spin_outcome(vi, false); // a win returned above
    }

    for (;;) {
        // A lone sleeper waits edge-triggered in epoll_wait: no need to drain
        // the doorbell afterwards, so a wake-up costs one system call on each
        // side.  Further sleepers poll the doorbell level-triggered and drain it.
        bool lone = sleepers_add(vi, 1) == 0;
        pollfd fds[5];
        int n = 0;
        bool direct = false;
        ViOps::DirectSleep ds{};
        {
            // A lock held since the first look needs no second look at the handle.
            ViGuard g = held ? ViGuard(vi, std::adopt_lock) : ViGuard(vi);
            if (!held && !vis().still(vi, handle)) {
                sleepers_add(vi, -1);
                return VIP_INVALID_PARAMETER;
            }
            held = false;
            // A receive waits for arrivals only: the peer consuming our own
            // messages must not wake it (a ping-pong would sleep twice per message).
            vi_arm(vi,
                   recv && !vi->fd_mode.load(std::memory_order_relaxed) && vi->sleepers.load() == 1
                       ? kWakeRecv
                       : kWakeAny);
            // A transport with level-triggered readiness needs no look between
            // arming and sleeping: whatever arrives meanwhile keeps its
            // descriptor ready.  The look before (Done, spinning, the last
            // wake-up) suffices.
            if (!level) vi_progress(vi);
            if (vi->prov) vi->nic->ops->vi->idle(vi);
            if (interrupted(&rc) || take(q, out, &rc)) {
                if (sleepers_add(vi, -1) == 1) vi_disarm(vi);
                return rc;
            }
            if (lone && level && direct_allowed(vi) && vi->nic->ops->vi->direct_begin(vi, &ds)) {
                // The bounded recv() must not overshoot the deadline.
                direct = deadline == kNoDeadline || deadline > now_ns() + ds.slice_ns;
                if (!direct) vi->nic->ops->vi->direct_end(vi, ds, -1, EAGAIN);
            }
            if (lone && (level || !vi_wait_set(vi))) lone = false;
            if (!lone && !direct) {
                fds[n++] = pollfd{vi->efd, POLLIN, 0};
                if (vi->prov) n += vi->nic->ops->vi->sleep_fds(vi, fds + n, 4);
            }
            ++vi->counters.Sleeps; // under the lock: VipQueryViCounters reads it
        }
        if (direct) {
            int saved = errno;
            ssize_t got = ::recv(ds.fd, ds.buf, ds.len, 0);
            int err = errno;
            errno = saved;
            __atomic_store_n(ds.state, 2, __ATOMIC_RELEASE);
            bool last = sleepers_add(vi, -1) == 1;
            ViGuard g(vi);
            if (!vis().still(vi, handle)) return VIP_INVALID_PARAMETER;
            if (last && !vi->fd_mode.load(std::memory_order_relaxed)) vi_disarm(vi);
            vi->nic->ops->vi->direct_end(vi, ds, got, err);
            vi_progress(vi);
            if (got < 0 && err == EINTR) return VIP_INTERRUPTED;
            if (interrupted(&rc) || take(q, out, &rc)) return rc;
            if (deadline != kNoDeadline && now_ns() >= deadline) return VIP_TIMEOUT;
            continue;
        }
        bool doorbell = false, transport_event = false;
        PollResult pr;
        if (lone) {
            epoll_event evs[4];
            int got = 0;
            pr = epoll_until(vis().local(vi).wait_ep, evs, 4, deadline, &got);
            for (int i = 0; i < got; ++i) (evs[i].data.u64 ? transport_event : doorbell) = true;
        } else {
            pr = poll_until(fds, n, deadline);
            doorbell = fds[0].revents & POLLIN;
            for (int i = 1; i < n; ++i) transport_event |= fds[i].revents != 0;
        }
        bool last = sleepers_add(vi, -1) == 1;
        {
            ViGuard g(vi);
            if (!vis().still(vi, handle)) return VIP_INVALID_PARAMETER;
            if (last && !vi->fd_mode.load(std::memory_order_relaxed)) vi_disarm(vi);
            if (doorbell) {
                if (lone)
                    vi->kicked.store(false, std::memory_order_release);
                else
                    vi_drain(vi);
            }
            if (transport_event && vi->prov) vi->nic->ops->vi->check_peer(vi);
            // Interrupted or not, what arrived meanwhile is queued here ...
            vi_progress(vi);
            // ... but a handler's run ends the call: the next one takes it.
            if (pr == PollResult::interrupted) return VIP_INTERRUPTED;
            if (interrupted(&rc) || take(q, out, &rc)) return rc;
        }
        if (pr == PollResult::timeout || (deadline != kNoDeadline && now_ns() >= deadline))
            return VIP_TIMEOUT;
        if (pr == PollResult::error) return VIP_ERROR_RESOURCE;
    }
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
