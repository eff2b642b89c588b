// Stream::Impl: what makes a stream shareable across fork and threads.
//
// Holders.  libvipl counts the processes that hold the shareable VI (every child forked
// after connect holds it, a dead one stops counting: VipQueryViHolders).  A close in a
// holder while others live destroys only its own copy of the VI (libvipl then drops
// that process's reference) and unmaps its copy of the memory; the last holder's close
// is the orderly one.  Counting and leaving happen under the stream's lock, so of two
// holders closing at once exactly one finds itself the last.
//
// The lock.  A robust process-shared mutex in the mapping, taken by every call and
// never held while sleeping.  A holder that dies holding it (in the middle of a write,
// say) may have left the queues half-changed: the next holder to take it marks the
// stream poisoned, which breaks it with connection_reset for everyone, and disconnects
// the VI so that the peer sees it too.
//
// Sleeping.  A holder that takes a completion may take the very event another holder
// (or thread) sleeps for on the VI's wait fd.  So a sleeper takes a slot with its own
// eventfd (made before any fork: every holder has it) and polls it beside the wait fd;
// whoever changes the state while slots are taken writes their eventfds when it lets
// the lock go.  A slot's eventfd has one reader, so nobody drains a wake-up meant for
// somebody else.  When every slot is taken a sleeper polls in slices of a millisecond.
//
// Memory of a stream this process left.  Its registration is in the NIC's region
// table, which this process shares with its children: deregistering it while a child
// still uses the VI would break the child.  A process that owns the NIC (made the
// stream) and keeps the NIC for other streams (a Listener's) keeps the registration
// until the last holder is gone, which a pipe tells: every holder keeps its write end,
// so its read end hangs up when the last one has closed it or died (Nic::sweep).
#include "stream_impl.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace vipl {

namespace {

// Initial-exec: read by every sleep and wake-up of a shareable stream, which a
// __tls_get_addr() call per access would slow.  What holds common/ is loaded at
// start (libvipl-db.so, the ORB transport's programs); one loaded by dlopen() finds
// these 4 bytes in the static TLS space glibc keeps spare for such libraries.
thread_local int t_tid __attribute__((tls_model("initial-exec"))) = 0;
// A fork child's only thread is the one that forked, and its cached id the parent's:
// the child would skip waking the parent's sleeper slot as its own.
const int g_tid_reset = pthread_atfork(nullptr, nullptr, [] { t_tid = 0; });

int this_tid() {
    if (!t_tid) t_tid = static_cast<int>(syscall(SYS_gettid));
    return t_tid;
}

} // namespace

std::error_code Stream::Impl::init_shared() {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    int r = pthread_mutex_init(&st->mu, &a);
    pthread_mutexattr_destroy(&a);
    if (r != 0) return std::error_code(r, std::generic_category());
    st->census.reset(detail::holder_token());
    detail::census_watch(&st->census);
    watched = true;
    for (int &fd : kick_fd) {
        fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0) return std::error_code(errno, std::generic_category());
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return std::error_code(errno, std::generic_category());
    gone_r = p[0];
    gone_w = p[1];
    return {};
}

bool Stream::Impl::enter_sole() {
    State &t = *st;
    if (!__libc_single_threaded) return false;
    uint64_t me = detail::holder_token();
    if (!t.census.only(me)) return false;
    t.sole.store(me, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    // The mutex must be free too: a holder that just left may still be finishing.
    if (t.census.only(me) && __atomic_load_n(&t.mu.__data.__lock, __ATOMIC_ACQUIRE) == 0)
        return true;
    t.sole.store(0, std::memory_order_release);
    return false;
}

void Stream::Impl::wait_sole_end() {
    State &t = *st;
    // Sole sections are short (never held while sleeping): spin, then yield, and now
    // and then ask whether the holder lives.  One that died in it leaves the queues as
    // a robust owner's death does.
    for (unsigned i = 0;; ++i) {
        uint64_t h = t.sole.load(std::memory_order_acquire);
        if (!h) return;
        if (i < 200) {
            Spin::relax();
            continue;
        }
        sched_yield();
        if (i % 1024 == 0 && h != detail::holder_token() && !detail::holder_alive(h) &&
            t.sole.compare_exchange_strong(h, 0, std::memory_order_acq_rel)) {
            poison();
            return;
        }
    }
}

void Stream::Impl::lock_shared() {
    if (!enter_sole()) {
        int r = pthread_mutex_lock(&st->mu);
        if (r == EOWNERDEAD) {
            pthread_mutex_consistent(&st->mu);
            poison();
        }
        wait_sole_end();
    }
    version_seen = st->version;
}

void Stream::Impl::unlock_shared() {
    if (st->version != version_seen && st->asleep) wake_sleepers();
    // Only this process writes its token there, and only with one thread.
    if (st->sole.load(std::memory_order_relaxed) == detail::holder_token()) {
        st->sole.store(0, std::memory_order_release);
        return;
    }
    pthread_mutex_unlock(&st->mu);
}

void Stream::Impl::poison() {
    State &t = *st;
    t.poisoned = true;
    // Nothing of the queues is trusted from now on; the error alone is written.
    t.broken = true;
    t.error = std::make_error_code(std::errc::connection_reset);
    t.version++;
    if (vi) VipDisconnect(vi); // the peer sees the end, every holder the Error state
    if (ev_fd >= 0 && !t.ev_set) {
        uint64_t one = 1;
        ssize_t n = ::write(ev_fd, &one, sizeof one);
        (void)n;
        t.ev_set = true;
    }
}

void Stream::Impl::wake_sleepers() {
    int me = this_tid();
    for (uint32_t i = 0; i < kSleepSlots; ++i) {
        if (!(st->asleep & (1u << i)) || st->sleeper[i].tid == me) continue;
        uint64_t one = 1;
        ssize_t n = ::write(kick_fd[i], &one, sizeof one);
        (void)n;
    }
}

VIP_ULONG Stream::Impl::arm_events(bool to_read) const {
    const State &t = *st;
    return to_read && t.pending.empty() && t.rdma_posted == 0 ? VIP_ARM_ARRIVALS : VIP_ARM_ANY;
}

bool Stream::Impl::sleep(Deadline deadline, bool to_read) {
    int ms = ms_left(deadline);
    // Alone on the VI: libvipl's own sleep, edge-triggered (no drain of the doorbell
    // after each wake-up, as a poll of the wait fd needs).  It arms and looks itself.
    if (!shared)
        return VipWaitViEvent(vi, arm_events(to_read), timeout_ms(deadline)) != VIP_INTERRUPTED;
    // After the last look: the VI's next event (or one already there) wakes us.
    VipArmViWaitFdEx(vi, arm_events(to_read));
    State &t = *st;
    int slot = -1;
    for (int pass = 0; pass < 2 && slot < 0; ++pass) {
        for (uint32_t i = 0; i < kSleepSlots && slot < 0; ++i)
            if (!(t.asleep & (1u << i))) slot = static_cast<int>(i);
        // All taken: free the slots of threads that died asleep.
        for (uint32_t i = 0; pass == 0 && slot < 0 && i < kSleepSlots; ++i)
            if (!detail::task_alive(t.sleeper[i].pid, t.sleeper[i].tid)) t.asleep &= ~(1u << i);
    }
    pollfd p[2] = {{vi_fd, POLLIN, 0}, {-1, POLLIN, 0}};
    if (slot >= 0) {
        t.asleep |= 1u << slot;
        t.sleeper[slot] = {getpid(), this_tid()};
        p[1].fd = kick_fd[slot];
    } else if (ms < 0 || ms > 1) {
        ms = 1;
    }
    // Changes made in this hold wake the others, not this sleeper.
    unlock_shared();
    int r = poll(p, slot >= 0 ? 2 : 1, ms);
    int err = errno;
    lock_shared();
    if (slot >= 0) {
        t.asleep &= ~(1u << slot);
        t.sleeper[slot] = {};
        if (p[1].revents & POLLIN) {
            uint64_t v;
            ssize_t n = ::read(kick_fd[slot], &v, sizeof v);
            (void)n;
        }
    }
    return !(r < 0 && err == EINTR);
}

bool Stream::Impl::shared_with_others() const {
    if (!shared || !vi) return false;
    // One load where the census knows this process as the only holder: others join only
    // by a fork, which counts the child before fork() returns.  (A sleeper asks before
    // each sleep; libvipl's answer scans its holder table.)  Dead holders stay counted,
    // so a census of several asks libvipl, which knows who still runs.
    if (st->census.only(detail::holder_token())) return false;
    VIP_ULONG n = 1;
    return VipQueryViHolders(vi, &n) == VIP_SUCCESS && n > 1;
}

void Stream::Impl::leave() noexcept {
    // Under the lock: a holder closing at the same time counts us gone or not gone, never
    // half.  libvipl drops this process's reference to the VI, nothing else.
    VipDestroyVi(vi);
    vi = nullptr;
    vi_fd = -1; // closed by libvipl
    // Still under the lock: the holders that stay may take sole sections once it goes.
    st->census.remove(detail::holder_token());
    detail::census_forget(&st->census);
    watched = false;
    unlock_shared();
    ::close(gone_w);
    gone_w = -1;
    // The NIC's owner keeps the registration until the last holder is gone, if the NIC
    // stays (a Listener's); a NIC that goes now takes its region table along.  A child
    // has the NIC in name only.
    if (registered && getpid() == owner_pid && nic.use_count() > 1) {
        nic->defer_deregister(mem + reg_off, mh, gone_r);
        gone_r = -1;
    }
    registered = false;
    release_local();
}

} // namespace vipl
