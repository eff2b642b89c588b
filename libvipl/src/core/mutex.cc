#include "core/mutex.h"

#include "core/clock.h"

#include <cerrno>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace vipl {

int futex_wait(std::atomic<uint32_t> *word, uint32_t expected, const struct timespec *rel) {
    return static_cast<int>(syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAIT,
                                    expected, rel, nullptr, 0));
}

int futex_wake(std::atomic<uint32_t> *word, int count) {
    return static_cast<int>(syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAKE,
                                    count, nullptr, nullptr, 0));
}

void Mutex::lock_slow() {
    // Short critical sections: a brief spin usually wins without a system call.
    for (int i = 0; i < 100; ++i) {
        cpu_relax();
        uint32_t expected = 0;
        if (state_.load(std::memory_order_relaxed) == 0 &&
            state_.compare_exchange_strong(expected, 1, std::memory_order_acquire))
            return;
    }
    int saved = errno;
    while (state_.exchange(2, std::memory_order_acquire) != 0) futex_wait(&state_, 2, nullptr);
    errno = saved;
}

void Mutex::wake() {
    int saved = errno;
    futex_wake(&state_, 1);
    errno = saved;
}

} // namespace vipl

namespace vipl {

void Mutex::make_robust(SoleSet sole) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&pm_, &a);
    pthread_mutexattr_destroy(&a);
    died_ = false;
    sole_.store(0, std::memory_order_relaxed);
    set_ = sole;
    census_ = sole.census;
    robust_ = true;
}

void Mutex::wait_sole_end() {
    // A sole section is short (the library never sleeps holding a lock): spin,
    // then give the CPU away, and now and then ask whether its holder lives.
    for (unsigned i = 0;; ++i) {
        uint64_t t = sole_.load(std::memory_order_acquire);
        if (!t) return;
        if (i < 200) {
            cpu_relax();
            continue;
        }
        sched_yield();
        if (i % 1024 == 0 && t != self_token() && set_.alive && !set_.alive(set_.set, t) &&
            sole_.compare_exchange_strong(t, 0, std::memory_order_acq_rel)) {
            died_ = true;
            return;
        }
    }
}

void Mutex::lock_robust() {
    int saved = errno;
    int rc = pthread_mutex_lock(&pm_);
    if (rc == EOWNERDEAD) {
        // The holder died inside the library: we hold the lock now; the
        // caller decides what the half-changed state means.
        died_ = true;
        pthread_mutex_consistent(&pm_);
    }
    wait_sole_end();
    errno = saved;
}

bool Mutex::try_lock_robust() {
    int saved = errno;
    int rc = pthread_mutex_trylock(&pm_);
    if (rc == EOWNERDEAD) {
        died_ = true;
        pthread_mutex_consistent(&pm_);
        rc = 0;
    }
    if (rc == 0 && sole_.load(std::memory_order_acquire)) {
        // A sole section is in progress: as good as held.  Unless its holder died in it.
        uint64_t t = sole_.load(std::memory_order_acquire);
        if (t && (t == self_token() || !set_.alive || set_.alive(set_.set, t))) {
            pthread_mutex_unlock(&pm_);
            rc = EBUSY;
        } else if (t && sole_.compare_exchange_strong(t, 0, std::memory_order_acq_rel)) {
            died_ = true;
        }
    }
    errno = saved;
    return rc == 0;
}

void Mutex::unlock_robust() {
    int saved = errno;
    pthread_mutex_unlock(&pm_);
    errno = saved;
}

} // namespace vipl
