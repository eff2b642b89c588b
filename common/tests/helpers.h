// Test helpers: providers, free ports, connected pairs, child processes, patterns.
#pragma once

#include "vipl/stream.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <new>
#include <string>
#include <vector>

namespace vt {

// Every stream test runs on both providers: "vipl+shm://127.0.0.1" and "vipl+tcp://127.0.0.1".
const std::vector<std::string> &providers();
#define CT_PROVIDER() GENERATE(from_range(::vt::providers()))

// Binds a listener on `base` (scheme://host) at a free port (port 0: the listener picks).
vipl::Listener bind_free(const std::string &base, const vipl::StreamOptions &o = {});

// Two connected streams in this process (the accept runs on a thread).  Destroying the
// pair closes both ends at once (on two threads): an orderly close waits for the peer.
struct Pair {
    vipl::Stream client, server;
    Pair() = default;
    Pair(Pair &&) = default;
    ~Pair();
};
Pair connect_pair(const std::string &base, const vipl::StreamOptions &o = {});

// Forks a child running fn (which must use only its own VIPL objects); the child leaves
// with _exit(fn()).  wait_child bounds the wait and kills the child after timeout_s.
int spawn(const std::function<int()> &fn);
int wait_child(int pid, int timeout_s = 30); // exit code, 128+signal, or -1 on timeout
// A child that connects to `uri` (within 10 s; exit code 2 if it cannot) and leaves
// with _exit(fn(stream)).
int spawn_client(const vipl::Uri &uri, const vipl::StreamOptions &o,
                 const std::function<int(vipl::Stream &)> &fn);
// The next connection on l, within 10 s (the test fails otherwise).
vipl::Stream accept_one(vipl::Listener &l);

// Whether fd polls readable within ms.
bool readable(int fd, int ms);

// The byte at stream offset `i` of pattern `seed`.
inline uint8_t pattern(uint64_t i, uint32_t seed) {
    uint64_t x = (i + seed) * 0x9E3779B97F4A7C15ull;
    return static_cast<uint8_t>(x >> 56);
}
void fill(std::byte *p, size_t n, uint64_t offset, uint32_t seed);
// Offset of the first mismatch, or -1.
int64_t check(const std::byte *p, size_t n, uint64_t offset, uint32_t seed);

// Writes all of buf (blocking); false on error.
bool write_all(vipl::Stream &s, const std::byte *p, size_t n);
// Reads exactly n bytes (blocking, each read bounded by `each`); false on error or end.
bool read_exact(vipl::Stream &s, std::byte *p, size_t n,
                std::chrono::milliseconds each = std::chrono::seconds(10));

// How a test reads a stream that may carry regions (zero copy, staged parts).
enum class ReadHow {
    direct,   // blocking reads without deadline: regions straight into the buffer
    deadline, // reads with a deadline: regions in pieces through a receive buffer
    random,   // blocking reads of random sizes from 1 B
    polling,  // non-blocking reads woken by poll() on fd(); blocking again on return
};
// Reads pattern `seed` in reads of up to buf_size bytes until `total` bytes, the end of
// the stream, an error (in *ec when given) or a wrong byte, 30 s at most; the bytes that
// were right.
uint64_t read_checked(vipl::Stream &s, uint64_t total, uint32_t seed, ReadHow how, size_t buf_size,
                      std::error_code *ec = nullptr);

// A writer that is killed mid-stream: writes pattern `seed` in blocking writes of `chunk`
// bytes, no deadline, until one fails; returns 0 (the child's exit code).
int write_pattern_until_error(vipl::Stream &s, size_t chunk, uint32_t seed);
// The reader of such a writer: reads pattern `seed` in blocking reads of buf_size bytes,
// no deadline, until an error or 15 s, and SIGKILLs `pid` once `kill_after` bytes came.
// A wrong byte fails the test.
struct KilledWriter {
    bool killed = false;
    std::error_code ec; // the read's error that ended it
};
KilledWriter read_killing_writer(vipl::Stream &s, int pid, uint64_t kill_after, uint32_t seed,
                                 size_t buf_size);

// Anonymous MAP_SHARED memory, zeroed.
void *map(size_t bytes);
void unmap(void *p, size_t bytes);

// One T in memory shared with the children forked afterwards (MAP_SHARED, zeroed, T
// constructed in place); unmapped when it goes out of scope.
template <class T>
struct Shared {
    T *p;
    Shared() : p(new (map(sizeof(T))) T()) {}
    ~Shared() { unmap(p, sizeof(T)); }
    Shared(const Shared &) = delete;
    Shared &operator=(const Shared &) = delete;
    T *operator->() { return p; }
    T &operator*() { return *p; }
};

// Runs the test case `name` of this program in a fresh process (exec) with `env` added
// ("NAME=value"): for settings libvipl reads once per process.  Its exit code.
int run_fresh(const std::string &name, const std::vector<std::string> &env, int timeout_s = 60);

// Open descriptors (/proc/self/fd) and mappings (/proc/self/maps) of this process.
int count_fds();
int count_maps();
// Waits until pred() holds, checking every millisecond, at most timeout_ms; returns pred().
bool wait_for(const std::function<bool()> &pred, int timeout_ms);

} // namespace vt
