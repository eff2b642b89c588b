#include "core/mutex.h"

#include "core/clock.h"

#include <cerrno>
#include <linux/futex.h>
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
