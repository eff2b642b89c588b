// The library's mutex.  By default a futex word guarding process-private
// state: no locked instruction at all while the process has one thread.
// Objects shared between processes make theirs robust: a process-shared
// robust mutex, so that a holder killed inside the library does not wedge the
// others; the next locker owns the lock and owner_died() says the state it
// guards may be half-way through a change.  While its process is the object's
// only holder and has one thread (a backend once the postmaster closed its
// copy, any client that never forked), a robust lock costs what a private one
// does: a sole section, marked by the process's token in sole_, which a fork
// (the only way another holder appears) or a second thread finds and waits out.
#pragma once

#include "core/token.h"

#include <atomic>
#include <cstdint>
#include <pthread.h>
#include <sys/single_threaded.h>

namespace vipl {

// A holder set's census (Holders::census): how many places are taken (top 8
// bits) and the XOR of their tokens (low 56).  This is a set whose only
// holder is t.
constexpr uint64_t kCensusTokenBits = (uint64_t(1) << 56) - 1;
constexpr uint64_t sole_census(uint64_t t) {
    return (uint64_t(1) << 56) | (t & kCensusTokenBits);
}

// What lets a robust lock take sole sections: its holder set's census, and how
// to ask the set whether the process with a token still lives.
struct SoleSet {
    const std::atomic<uint64_t> *census = nullptr;
    bool (*alive)(const void *set, uint64_t token) = nullptr;
    const void *set = nullptr;
};

class Mutex {
public:
    Mutex() = default;
    Mutex(const Mutex &) = delete;
    Mutex &operator=(const Mutex &) = delete;

    // Switches to the robust process-shared kind; only while nobody uses it.
    // sole: the guarded object's holder set (its census says when this
    // process is the only holder); none for a lock every process may take.
    void make_robust(SoleSet sole = {});
    bool robust() const { return robust_; }

    // With one thread no other can hold or want this process-private lock:
    // plain stores keep its state exact without a locked instruction.  The
    // state stays exact, so a thread started while the lock is held finds it
    // held, and the unlock that follows sees the flag cleared and wakes it.
    __attribute__((always_inline)) void lock() {
        if (robust_) {
            if (enter_sole()) return;
            return lock_robust();
        }
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
        if (robust_) return enter_sole() || try_lock_robust();
        if (single_threaded() && state_.load(std::memory_order_relaxed) == 0) {
            state_.store(1, std::memory_order_relaxed);
            std::atomic_signal_fence(std::memory_order_acquire);
            return true;
        }
        uint32_t expected = 0;
        return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire);
    }
    __attribute__((always_inline)) void unlock() {
        if (robust_) {
            // Only this process writes its token there, and only with one thread.
            if (sole_.load(std::memory_order_relaxed) == self_token()) {
                sole_.store(0, std::memory_order_release);
                return;
            }
            return unlock_robust();
        }
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
    // A sole section: with one thread and the only place in the holder set, no
    // other process or thread can want the lock until this one forks or starts
    // a thread, and both find the mark (the robust paths wait it out).  The
    // mark goes first, then the look: a fork from a signal handler between the
    // two leaves the count at 2 and the mark visible to the child.  The robust
    // word must be free too: a holder that just left may still be finishing.
    __attribute__((always_inline)) bool enter_sole() {
        if (!census_ || !single_threaded()) return false;
        uint64_t me = self_token();
        if (census_->load(std::memory_order_acquire) != sole_census(me)) return false;
        sole_.store(me, std::memory_order_relaxed);
        std::atomic_signal_fence(std::memory_order_seq_cst);
        if (census_->load(std::memory_order_acquire) == sole_census(me) &&
            __atomic_load_n(&pm_.__data.__lock, __ATOMIC_ACQUIRE) == 0)
            return true;
        sole_.store(0, std::memory_order_release);
        return false;
    }
    // With the robust lock held: waits until no sole section is in progress
    // (one its holder began before a fork or a thread start); a holder that
    // died in one leaves the lock as a robust owner's death does.
    void wait_sole_end();
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
    std::atomic<uint64_t> sole_{0};                 // token of the process in a sole section
    const std::atomic<uint64_t> *census_ = nullptr; // SoleSet::census
    SoleSet set_;
};

// Futex helpers on a 32-bit word (not private: the word may be in a shared mapping).
int futex_wait(std::atomic<uint32_t> *word, uint32_t expected, const struct timespec *rel);
int futex_wake(std::atomic<uint32_t> *word, int count);

} // namespace vipl
