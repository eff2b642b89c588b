// What shows where a connection's bytes went: the interposer's connection table of a
// process (the memfd that `vipl-run --stat` reads, through support/vipl_stats.h), read
// while the connection is open; and what /proc says of a process (descriptors, memfds,
// mappings, a TCP connection's local port).  The test process runs as root, so it reads
// the tables of the postgres user's processes and of other users' clients alike.
//
// Thread rules: one thread.  Not async-signal-safe.
#pragma once

#include "program.h"
#include "vipl_stats.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pgt {

using vipl::db::test::Carrier;
using vipl::db::test::StatRow;

enum class Role { client, server }; // connected, or accepted

// The rows of process pid's table; fails the test when it has none (not interposed).
std::vector<StatRow> table(int pid);
// Whether pid has a table at all (an interposed process that made a connection).
bool has_table(int pid);
// The rows of a role carried by c.
std::vector<StatRow> rows_of(const std::vector<StatRow> &rows, Role role, Carrier c);
// A table as `vipl-run --stat` would print it (for failure messages).
std::string describe(int pid, const std::vector<StatRow> &rows);

// Requires that process pid has exactly n rows of `role`, every one carried by c, with at
// least min_bytes read and min_bytes written; the message shows its table.
void require_carried(int pid, Role role, Carrier c, size_t n = 1, uint64_t min_bytes = 1);
// The same, waiting up to ms for it to become true first (a connection that is still
// negotiating, a process that has not made its connection yet).
void await_carried(int pid, Role role, Carrier c, size_t n = 1, uint64_t min_bytes = 1,
                   int ms = 5000);
// Requires that pid, when it has a table, lists no connection of `role` riding vipl.
void require_not_carried(int pid, Role role);

// The row of `role` whose peer address ends with ":<port>" (TCP) or is `path` (unix), or
// one with n.fd == -1 (none).
StatRow row_to(int pid, Role role, const std::string &peer_suffix);

// What the tables of a running program and its descendants showed while it ran: for every
// (pid, fd) seen, its row with the highest counts (a connection too short-lived for one
// look).  Samples every millisecond or so until the program ends or ms pass.
struct Seen {
    int pid = 0;
    StatRow row;
};
std::vector<Seen> watch(Program &p, int ms);
std::string describe(const std::vector<Seen> &seen);

// /proc facts of a process.
int fd_count(int pid);
int memfd_count(int pid);
int map_count(int pid);
int thread_count(int pid);
// The local TCP port of process pid's connection to remote_port (-1: none), from its
// descriptors and /proc/<pid>/net/tcp and tcp6.
int local_port_to(int pid, int remote_port);

// What a long-lived process holds, compared before and after what must not leak.
struct Footprint {
    int fds = 0, memfds = 0, maps = 0, threads = 0, children = 0;
    bool operator==(const Footprint &o) const = default;
};
Footprint footprint(int pid);
std::string describe(const Footprint &f);
// Waits up to ms for pid's footprint to equal `before` (a backend's exit is reaped by
// the postmaster a little later); requires it then, showing both.
void require_footprint(int pid, const Footprint &before, int ms = 3000);

} // namespace pgt
