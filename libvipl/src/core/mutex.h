// A futex mutex that also works in memory shared between processes.
#pragma once

#include <atomic>
#include <cstdint>

namespace vipl {

class Mutex {
public:
    void lock() {
        uint32_t expected = 0;
        if (state_.compare_exchange_strong(expected, 1, std::memory_order_acquire)) return;
        lock_slow();
    }
    bool try_lock() {
        uint32_t expected = 0;
        return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire);
    }
    void unlock() {
        if (state_.exchange(0, std::memory_order_release) == 2) wake();
    }
    bool locked() const { return state_.load(std::memory_order_relaxed) != 0; }

private:
    void lock_slow();
    void wake();
    std::atomic<uint32_t> state_{0}; // 0 free, 1 held, 2 held with sleepers
};

// Futex helpers on a 32-bit word (not private: the word may be in a shared mapping).
int futex_wait(std::atomic<uint32_t> *word, uint32_t expected, const struct timespec *rel);
int futex_wake(std::atomic<uint32_t> *word, int count);

} // namespace vipl
