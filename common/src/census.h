// Census: which processes hold a shareable stream, in one word its lock reads.
//
// A shareable stream's lock is a robust process-shared mutex, and glibc's robust
// mutexes cost two list updates and two locked instructions per call.  Most of the
// time one process holds the stream (a PostgreSQL backend once the postmaster closed
// its copy; any client that never forked) and has one thread: then nobody else can
// want the lock, and a store marks the hold instead (a "sole section", stream_share.cc).
// The census says when: how many processes hold the stream (top 8 bits) and the XOR
// of their tokens (low 56), so that one load tells a process it is the only holder.
//
// Processes join only by fork: the fork handler adds the child's token to every
// census this process is in before fork() returns, so no sole section can begin in
// the parent once the child exists.  A holder leaves with remove(), under the
// stream's lock; a holder that dies stays counted (its streams keep the robust lock,
// which is correct, only slower).
#pragma once

#include <atomic>
#include <cstdint>

namespace vipl::detail {

// This process among holders: its pid (bits 32..63, for the liveness check) and 32
// bits of its own (pids are reused).  A fork child gets a new one before fork()
// returns in it.
uint64_t holder_token();
// Whether the process that holds with `token` still runs (a zombie does not).
bool holder_alive(uint64_t token);
// Whether thread tid of process pid (tid 0: the process) still runs (a zombie does not).
bool task_alive(int pid, int tid);

struct Census {
    std::atomic<uint64_t> word{0};

    static constexpr uint64_t kTokenBits = (uint64_t(1) << 56) - 1;
    static constexpr uint64_t kMany = 255; // saturates: never the only holder again
    static constexpr uint64_t sole(uint64_t t) { return (uint64_t(1) << 56) | (t & kTokenBits); }

    // The creator alone.
    void reset(uint64_t t) { word.store(sole(t), std::memory_order_release); }
    bool only(uint64_t t) const { return word.load(std::memory_order_acquire) == sole(t); }
    void add(uint64_t t) { change(t, 1); }
    void remove(uint64_t t) { change(t, -1); }

private:
    void change(uint64_t t, int d);
};

// The censuses of the shareable streams this process holds, for the fork handler.
// watch() when a stream becomes shareable here, forget() before its memory goes.
void census_watch(Census *c);
void census_forget(Census *c);

} // namespace vipl::detail
