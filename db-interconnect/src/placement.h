// Where the two ends of a connection run, and whether shared memory can pay there.
//
// A shm stream beats the kernel socket because each end polls the ring while the other
// works on another CPU: no system call and no wake-up on the data path.  When client and
// server may run only on one and the same CPU (both pinned there, or a one-CPU machine),
// nobody polls while the other runs; a waiter hands the CPU to its peer with sched_yield,
// which the scheduler honours only within one scheduling group (a cgroup with the cpu
// controller, or else a session's autogroup while kernel.sched_autogroup_enabled=1).
// PostgreSQL's postmaster runs in a session of its own (pg_ctl starts it with setsid),
// so a client and its backend are in two groups: each message then costs a wake-up
// through the kernel as well, and the stream's bookkeeping, found cold after each
// switch, costs more than the copy through the kernel it saves.  Such a connection
// stays on the kernel socket: the server answers the HELLO with Status::one_cpu.  Both
// ends on one CPU in one group (autogroups off, one session) ride vipl, and so does
// every connection when either end sets VIPL_DB_ONE_CPU=1.
//
// The decision is taken once, when the connection is made: a process pinned elsewhere
// later keeps what it had.  The client says in its HELLO which single CPU it may run on,
// which kernel it runs under (two network namespaces share the kernel and its CPU
// numbers; two hosts do not) and which scheduling group it is in; the server compares.
//
// Thread and signal rules: thread-safe and async-signal-safe (system calls into stack
// buffers); the tags are read from /proc once per process.
#pragma once

#include <cstdint>

namespace vipl::db {

struct Hello;

// Fills the HELLO's placement fields (cpu, host, group) for this client, unless
// VIPL_DB_ONE_CPU=1 asks for vipl whatever the placement (then all stay 0).
void placement_say(Hello *h) noexcept;

// Whether the connection of a client that sent h to this server is better left on the
// kernel socket: both may run only on the same CPU, in two scheduling groups, and
// VIPL_DB_ONE_CPU leaves such a connection to the kernel.
bool placement_kernel(const Hello &h) noexcept;

// The pieces, for tests and `vipl-run --config`-like tools: the calling thread's only
// allowed CPU plus one (0: several); tags of the running kernel and of this process's
// scheduling group (never 0 when known, 0 when not).
uint32_t sole_cpu() noexcept;
uint32_t host_tag() noexcept;
uint32_t group_tag() noexcept;

} // namespace vipl::db
