// What the interposer's connection table says about a process, read by the tools' reader
// (tools/table.h, what `vipl-run --stat` uses), for tests that must know whether a
// connection really rides vipl.
//
// Thread rules: thread-safe (it only reads).  Not async-signal-safe (it allocates).
// Fork: a child reads its own table (the interposer gives every process one of its own).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vipl::db::test {

// What carries a connection, as the table says.
enum class Carrier {
    none,   // no table, or no slot for that descriptor: not an interposed connection
    kernel, // interposed, its bytes on the kernel connection (undecided, or fallen back)
    shm,
    tcp,
};

const char *carrier_name(Carrier c);

// One row of the table.
struct StatRow {
    int fd = -1;
    bool server = false; // accepted (true) or connected (false)
    Carrier carrier = Carrier::none;
    std::string peer;
    uint64_t bytes_in = 0, bytes_out = 0, calls_in = 0, calls_out = 0;
};

// The rows of process pid's table (0: this process).  False, with *why, when the
// process has no table we can read (not preloaded, gone, another user's).
bool stat_rows(int pid, std::vector<StatRow> *rows, std::string *why = nullptr);

// What carries descriptor fd of this process.  The table knows a connection by the
// descriptor it was connected or accepted on (a dup of it is not listed), and a fork
// child's table lists what it inherited under the same numbers.
Carrier carrier_of(int fd);

} // namespace vipl::db::test
