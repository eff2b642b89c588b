// The library's mutex.  By default a futex word guarding process-private
// state: no locked instruction at all while the process has one thread.
// Objects shared between processes make theirs robust: a process-shared
// robust mutex, so that a holder killed inside the library does not wedge the
// others; the next locker owns the lock and owner_died() says the state it
// guards may be half-way through a change.
#pragma once

#include <atomic>
#include <cstdint>
#include <pthread.h>
#include <sys/single_threaded.h>

namespace vipl {

class Mutex {
public:
    Mutex() = default;
    Mutex(const Mutex &) = delete;
    Mutex &operator=(const Mutex &) = delete;

    // Switches to the robust process-shared kind; only while nobody uses it.
    void make_robust();
    bool robust() const { return robust_; }

    // With one thread no other can hold or want this process-private lock:
    // plain stores keep its state exact without a locked instruction.  The
    // state stays exact, so a thread started while the lock is held finds it
    // held, and the unlock that follows sees the flag cleared and wakes it.
    __attribute__((always_inline)) void lock() {
        if (robust_) return lock_robust();
        if (single_threaded()) {
            state_.store(1, std::memory_order_relaxed);
            std::atomic_signal_fence(std::memory_order_acquire);
            return;
        }
        uint32_t expected = 0;
        if (state_.compare_exchange_strong(expected, 1, std::memory_order_acquire)) return;
        lock_slow();
    }
    __attribute__((always_inline)) bool try_lock() {
        if (robust_) return try_lock_robust();
        if (single_threaded() && state_.load(std::memory_order_relaxed) == 0) {
            state_.store(1, std::memory_order_relaxed);
            std::atomic_signal_fence(std::memory_order_acquire);
            return true;
        }
        uint32_t expected = 0;
        return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire);
    }
    __attribute__((always_inline)) void unlock() {
        if (robust_) return unlock_robust();
        if (single_threaded()) {
            std::atomic_signal_fence(std::memory_order_release);
            state_.store(0, std::memory_order_relaxed);
            return;
        }
        if (state_.exchange(0, std::memory_order_release) == 2) wake();
    }
    bool locked() const { return state_.load(std::memory_order_relaxed) != 0; }

    // No other thread exists (glibc clears the flag before a second thread
    // starts): state no other process sees needs no locked instruction.
    static bool single_threaded() { return __libc_single_threaded != 0; }

    // A previous holder died holding the lock (robust kind only); call with
    // the lock held.  clear_owner_died() once the state has been dealt with.
    bool owner_died() const { return died_; }
    void clear_owner_died() { died_ = false; }

private:
    // Out of line: the fast paths above stay small enough to inline.
    __attribute__((noinline)) void lock_slow();
    __attribute__((noinline)) void wake();
    __attribute__((noinline)) void lock_robust();
    __attribute__((noinline)) bool try_lock_robust();
    __attribute__((noinline)) void unlock_robust();

    std::atomic<uint32_t> state_{0}; // 0 free, 1 held, 2 held with sleepers
    bool robust_ = false;
    bool died_ = false;
    pthread_mutex_t pm_;
};

// Futex helpers on a 32-bit word (not private: the word may be in a shared mapping).
int futex_wait(std::atomic<uint32_t> *word, uint32_t expected, const struct timespec *rel);
int futex_wake(std::atomic<uint32_t> *word, int count);

} // namespace vipl
