#include "one_cpu_memo.h"

#include "hello.h"
#include "kernel_io.h"

#include <atomic>

namespace vipl::db {

namespace {

struct Entry {
    Clock::time_point at{}; // the epoch: empty
    uint32_t server = 0, cpu = 0, host = 0, group = 0;
};

// A few servers at a time: a program that connects per transaction talks to one or two.
constexpr int kEntries = 8;
Entry g_entries[kEntries];
std::atomic_flag g_busy = ATOMIC_FLAG_INIT;

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
        if (x.at != Clock::time_point{} && x.server == server) {
            e = &x;
            break;
        }
        if (x.at < e->at) e = &x;
    }
    *e = Entry{Clock::now(), server, h.cpu, h.host, h.group};
}

bool one_cpu_recalls(uint32_t server, const Hello &h, uint64_t *age_ms) noexcept {
    if (!h.cpu) return false;
    Hold hold;
    if (!hold) return false;
    Clock::time_point now = Clock::now();
    for (const Entry &x : g_entries) {
        if (x.at == Clock::time_point{} || x.server != server || x.cpu != h.cpu ||
            x.host != h.host || x.group != h.group)
            continue;
        auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - x.at).count();
        if (age >= static_cast<int64_t>(kOneCpuMemoMs)) return false;
        *age_ms = static_cast<uint64_t>(age);
        return true;
    }
    return false;
}

} // namespace vipl::db
