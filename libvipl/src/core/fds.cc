#include "core/fds.h"

#include <atomic>
#include <cstdint>
#include <unistd.h>

namespace vipl {
namespace {

// One bit per descriptor number up to 2^20 (the kernel's default nr_open):
// lock-free, so the fork child can walk it even if a parent thread held a lock.
constexpr int kMaxFd = 1 << 20;
std::atomic<uint64_t> g_bits[kMaxFd / 64];
// Words of g_bits ever used: the child walks only those, and reads a word before it
// clears it, so a fork child of a server (one per connection) writes none of the 128 KiB
// it does not use (each write of a page would copy it) and takes no locked instruction
// per word.
std::atomic<int> g_words{0};

} // namespace

int fd_track(int fd, bool shared) {
    if (!shared && fd >= 0 && fd < kMaxFd) {
        int w = fd / 64 + 1;
        int used = g_words.load(std::memory_order_relaxed);
        while (used < w && !g_words.compare_exchange_weak(used, w, std::memory_order_relaxed)) {
        }
        g_bits[fd / 64].fetch_or(1ull << (fd % 64), std::memory_order_relaxed);
    }
    return fd;
}

void fd_share(int fd) {
    if (fd >= 0 && fd < kMaxFd)
        g_bits[fd / 64].fetch_and(~(1ull << (fd % 64)), std::memory_order_relaxed);
}

void fd_close(int fd) {
    if (fd < 0) return;
    if (fd < kMaxFd) g_bits[fd / 64].fetch_and(~(1ull << (fd % 64)), std::memory_order_relaxed);
    close(fd);
}

void fd_close_all_inherited() {
    int used = g_words.load(std::memory_order_relaxed);
    for (int w = 0; w < used; ++w) {
        if (g_bits[w].load(std::memory_order_relaxed) == 0) continue;
        uint64_t bits = g_bits[w].exchange(0, std::memory_order_relaxed);
        while (bits) {
            int b = __builtin_ctzll(bits);
            bits &= bits - 1;
            close(w * 64 + b);
        }
    }
}

} // namespace vipl
