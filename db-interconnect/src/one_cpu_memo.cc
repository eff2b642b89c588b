#include "one_cpu_memo.h"

#include "hello.h"

#include <atomic>
#include <ctime>

namespace vipl::db {

namespace {

struct Entry {
    uint64_t at_ns = 0; // 0: empty
    uint32_t server = 0, cpu = 0, host = 0, group = 0;
};

// A few servers at a time: a program that connects per transaction talks to one or two.
constexpr int kEntries = 8;
Entry g_entries[kEntries];
std::atomic_flag g_busy = ATOMIC_FLAG_INIT;

uint64_t now_ns() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// The memo while it lives, or nothing when another holder has it (never waits: the
// holder may be the code a signal handler interrupted).
class Hold {
public:
    Hold() noexcept : held_(!g_busy.test_and_set(std::memory_order_acquire)) {}
    ~Hold() {
        if (held_) g_busy.clear(std::memory_order_release);
    }
    Hold(const Hold &) = delete;
    Hold &operator=(const Hold &) = delete;
    explicit operator bool() const noexcept { return held_; }

private:
    bool held_;
};

} // namespace

void one_cpu_remember(uint32_t server, const Hello &h) noexcept {
    if (!h.cpu) return;
    Hold hold;
    if (!hold) return;
    // The server's own entry, else the oldest (an empty one is oldest of all).
    Entry *e = &g_entries[0];
    for (Entry &x : g_entries) {
        if (x.at_ns && x.server == server) {
            e = &x;
            break;
        }
        if (x.at_ns < e->at_ns) e = &x;
    }
    *e = Entry{now_ns(), server, h.cpu, h.host, h.group};
}

bool one_cpu_recalls(uint32_t server, const Hello &h, uint64_t *age_ms) noexcept {
    if (!h.cpu) return false;
    Hold hold;
    if (!hold) return false;
    uint64_t now = now_ns();
    for (const Entry &x : g_entries) {
        if (!x.at_ns || x.server != server || x.cpu != h.cpu || x.host != h.host ||
            x.group != h.group)
            continue;
        uint64_t age = (now - x.at_ns) / 1000000u;
        if (age >= kOneCpuMemoMs) return false;
        *age_ms = age;
        return true;
    }
    return false;
}

} // namespace vipl::db
