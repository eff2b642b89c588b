#include "core/token.h"

#include <ctime>
#include <unistd.h>

namespace vipl {

std::atomic<uint64_t> g_self_token{0};

uint64_t self_token_first() {
    renew_self_token();
    return g_self_token.load(std::memory_order_relaxed);
}

uint64_t new_token() {
    static std::atomic<uint64_t> counter{0};
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t =
        (static_cast<uint64_t>(getpid()) << 40) ^ static_cast<uint64_t>(ts.tv_sec) * 1000000000ull ^
        static_cast<uint64_t>(ts.tv_nsec) ^ (counter.fetch_add(1, std::memory_order_relaxed) << 20);
    return t | 1;
}

void renew_self_token() {
    g_self_token.store(new_token(), std::memory_order_relaxed);
}

void set_self_token(uint64_t t) {
    g_self_token.store(t, std::memory_order_relaxed);
}

} // namespace vipl
