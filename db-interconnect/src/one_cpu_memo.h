// A client's memory of its servers' one-CPU answers (placement.h).
//
// A server that finds its client on its own single CPU, in another scheduling group,
// answers the HELLO with Status::one_cpu and the connection stays on the kernel socket.
// A program that connects once per transaction (pgbench -C, a PHP page) would ask the
// same question of the same server again and again, and pay a round trip and the
// server's look at its placement each time, for the same answer.  The client remembers
// the answer for kOneCpuMemoMs, keyed by the server's marker and its own placement (CPU,
// kernel, group): a connection made meanwhile from the same placement sends no HELLO
// and stays on the kernel socket, as a plain client's would (a server takes a connection
// without a HELLO for a plain one).  Any other placement, and the first connection after
// the memo lapsed, asks again: a server pinned elsewhere meanwhile is seen within that
// time.  Only one_cpu answers are remembered: the server's VIPL_DB_ONE_CPU=1, which
// answers ok, is never skipped.
//
// Thread and signal rules: thread-safe and async-signal-safe (a connect() inside a
// handler, psql's PQcancel): a call that finds the memo busy in another thread or in the
// code it interrupted neither waits nor remembers; the connection then asks the server.
#pragma once

#include <cstdint>

namespace vipl::db {

struct Hello;

constexpr uint64_t kOneCpuMemoMs = 1000;

// Remembers that the server `server` (a tag of its marker's name) answered one_cpu to a
// HELLO that carried h's placement.
void one_cpu_remember(uint32_t server, const Hello &h) noexcept;

// Whether `server` answered one_cpu to h's very placement less than kOneCpuMemoMs ago;
// *age_ms says how long ago.  h has been filled by placement_say (cpu 0: never).
bool one_cpu_recalls(uint32_t server, const Hello &h, uint64_t *age_ms) noexcept;

} // namespace vipl::db
