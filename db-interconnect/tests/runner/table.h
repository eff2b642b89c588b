// The connections a process interposes, as `vipl-run --stat PID...` prints them while
// they are open: the tests' evidence of which transport carried a connection.
//
// Thread rules: thread-safe.  Not async-signal-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dbt {

struct StatRow {
    int pid = 0;
    int fd = -1;
    std::string role;  // "server" (accepted) or "client"
    std::string trans; // "shm", "tcp" or "kernel"
    std::string peer;
    uint64_t bytes_in = 0, bytes_out = 0;
};

// The rows of these processes (bounded: fails the test when vipl-run does not answer).
std::vector<StatRow> stat_rows(const std::vector<int> &pids);
// The rows of pid and every process below it.
std::vector<StatRow> stat_tree(int pid);

// Rows with that role and transport ("" matches any).
std::vector<StatRow> select(const std::vector<StatRow> &rows, const std::string &role,
                            const std::string &trans);

// A connection starts on its kernel socket and moves to its stream once the stream is up
// (db-interconnect/README.md): reads rows with `get` until n rows of that role ride vipl
// over `trans`, or ms passed, and returns the last rows read (the plain mode: the first).
std::vector<StatRow> when_riding(const std::function<std::vector<StatRow>()> &get,
                                 const std::string &role, size_t n,
                                 const std::string &trans = "shm", int ms = 5000);
// when_riding over the rows of pid and the processes below it.
std::vector<StatRow> tree_when_riding(int pid, const std::string &role, size_t n,
                                      const std::string &trans = "shm");

// Requires exactly n rows of that role among rows, all riding vipl over `trans` ("shm" on
// one host, "tcp" across hosts), each with at least min_in bytes read and min_out
// written; in the plain mode, no rows at all.
void require_riding(const std::vector<StatRow> &rows, const std::string &role, size_t n,
                    uint64_t min_in = 0, uint64_t min_out = 0, const std::string &trans = "shm");
// Requires exactly n rows of that role, all on the kernel; in the plain mode, no rows.
void require_kernel(const std::vector<StatRow> &rows, const std::string &role, size_t n);

// The rows as vipl-run printed them, for failure messages.
std::string describe(const std::vector<StatRow> &rows);

} // namespace dbt
