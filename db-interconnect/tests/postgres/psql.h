// An open psql session the test drives line by line: the unmodified psql of PostgreSQL
// 15 with its standard input and output in a pipe (or a pseudo-terminal, which makes it
// interactive: it then resets a lost connection, as a user's psql does), so that its
// connection stays open while the test reads the connection tables of psql and of its
// backend.  psql runs with -X -q -A -t: rows unaligned, no headers; errors come in the
// same stream as rows, in order.
//
// Thread rules: one thread.  Not async-signal-safe.
#pragma once

#include "cluster.h"

#include <string>

namespace pgt {

class Psql {
public:
    // Starts psql on conninfo as `how` says, in `cluster`'s place; the first query
    // (pg_backend_pid) shows it connected.  Fails the test when it does not connect.
    Psql(const PgCluster &cluster, const std::string &conninfo, const Client &how = {},
         bool tty = false);
    ~Psql();
    Psql(const Psql &) = delete;
    Psql &operator=(const Psql &) = delete;

    // Runs sql (statements and psql commands, one or more lines) and returns what psql
    // printed for it, trimmed; fails the test when psql does not finish it within ms.
    std::string query(const std::string &sql, int ms = 30000);
    // Sends sql and returns at once; what it prints is read by expect().
    void send(const std::string &sql);
    // Waits up to ms for `needle` in what psql printed since the last send/query; the
    // time (now_ns clock) at which it arrived, or 0 when it did not.
    uint64_t expect(const std::string &needle, int ms);
    // Whether `needle` arrived since the last send/query (nothing is waited for).
    bool saw(const std::string &needle) const;
    // What psql printed since the last send/query.
    std::string since_send() const;

    int pid() const { return prog_.pid(); }
    int backend_pid() const { return backend_; }
    // Asks again (after a reset the backend is another process).
    int refresh_backend_pid();
    Program &program() { return prog_; }
    // Ends psql (\q, then end of input); its exit status, -1 when it did not end.
    int quit(int ms = 10000);

private:
    const PgCluster *cluster_;
    std::string command_;
    Program prog_;
    size_t mark_ = 0; // output offset at the last send
    int seq_ = 0;
    int backend_ = -1;
};

// The arguments every session's psql gets.
std::vector<std::string> psql_argv(const std::string &conninfo, bool tty);

// Waits until backend runs a `SELECT pg_sleep` (the query a session sent reached the
// server), up to 10 s; fails the test when it does not.  The cancel and fault cases act
// on a session only once its query is known to be running.
void await_sleeping(PgCluster &pg, int backend);

// The postmaster's footprint to compare against after what must not leak: taken once a
// first session over the unix socket has come and gone, since a first connection makes
// what lasts as long as the postmaster.
Footprint postmaster_baseline(PgCluster &pg);

} // namespace pgt
