// What `vipl-run --stat` shows: each process keeps its interposed connections in a small
// shared-memory file of its own (a memfd named "vipl-db-stats"), which a tool of the same
// user (or root) opens through /proc/<pid>/fd and reads without stopping the process.
// Nothing is left behind: the memory goes with the process.  A fork child makes its own.
//
// Layout (native byte order: read on the same host): StatHeader, then kStatSlots slots.
// Counters are updated with relaxed atomic adds by the owning process only.
//
// Readers outside the interposer use the C declaration of the same bytes (stats_layout.h),
// checked against these below.
//
// Thread rules: thread-safe.  Not async-signal-safe.
#pragma once

#include "stats_layout.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>

namespace vipl::db {

constexpr uint32_t kStatSlots = 4096;
constexpr char kStatMagic[8] = {'V', 'I', 'P', 'L', 'D', 'B', 'S', '1'};
constexpr char kStatName[] = VIPL_DB_STAT_NAME;

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

// The C declaration readers use (stats_layout.h) is these bytes.
static_assert(sizeof(StatHeader) == sizeof(vipl_db_stat_header) &&
              sizeof(StatSlot) == sizeof(vipl_db_stat_slot) && kStatSlots == VIPL_DB_STAT_SLOTS);
static_assert(offsetof(StatSlot, transport) == offsetof(vipl_db_stat_slot, transport) &&
              offsetof(StatSlot, peer) == offsetof(vipl_db_stat_slot, peer) &&
              offsetof(StatSlot, bytes_in) == offsetof(vipl_db_stat_slot, bytes_in) &&
              offsetof(StatSlot, sleeps) == offsetof(vipl_db_stat_slot, sleeps));
static_assert(std::string_view(kStatMagic, 8) == VIPL_DB_STAT_MAGIC);
static_assert(uint8_t(StatTransport::kernel) == VIPL_DB_STAT_KERNEL &&
              uint8_t(StatTransport::shm) == VIPL_DB_STAT_SHM &&
              uint8_t(StatTransport::tcp) == VIPL_DB_STAT_TCP);
static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free);

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
