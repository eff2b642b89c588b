// What `vipl-run --stat` shows: each process keeps its interposed connections in a small
// shared-memory file of its own (a memfd named "vipl-db-stats"), which a tool of the same
// user (or root) opens through /proc/<pid>/fd and reads without stopping the process.
// Nothing is left behind: the memory goes with the process.  A fork child makes its own.
//
// Layout (native byte order: read on the same host): StatHeader, then kStatSlots slots.
// Counters are updated with relaxed atomic adds by the owning process only.
//
// Thread rules: thread-safe.  Not async-signal-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace vipl::db {

constexpr uint32_t kStatSlots = 4096;
constexpr char kStatMagic[8] = {'V', 'I', 'P', 'L', 'D', 'B', 'S', '1'};
constexpr char kStatName[] = "vipl-db-stats";

enum class StatTransport : uint8_t { kernel = 0, shm = 1, tcp = 2 };

struct StatHeader {
    char magic[8];
    uint32_t slots;
    int32_t pid;
};

struct StatSlot {
    std::atomic<uint32_t> in_use;
    int32_t fd;
    uint8_t transport; // StatTransport
    uint8_t server;    // 1: accepted, 0: connected
    uint8_t pad[2];
    char peer[72]; // the kernel connection's peer address, as text
    std::atomic<uint64_t> bytes_in, bytes_out, calls_in, calls_out;
    std::atomic<uint64_t> messages_in, messages_out, spins, sleeps;
};

// A slot for a new connection (null when the table is full or cannot be made).
StatSlot *stat_open(int fd, bool server, int kernel_fd) noexcept;
void stat_close(StatSlot *s) noexcept;
// A fork child starts a table of its own: the caller re-opens its inherited connections.
void stat_after_fork_child() noexcept;
std::mutex &stat_lock();

inline void stat_add(std::atomic<uint64_t> &c, uint64_t n) {
    c.fetch_add(n, std::memory_order_relaxed);
}

} // namespace vipl::db
