// The tests' Python programs (programs/*.py) and socat clients, started and checked the
// same way by every test that uses them.
//
// Thread rules: a test's thread.  Not async-signal-safe.
#pragma once

#include "endpoint.h"
#include "files.h"
#include "process.h"
#include "table.h"

#include <map>
#include <string>
#include <vector>

namespace dbt {

// The asyncio echo server (programs/echo_server.py) on e, started from `base` (its argv
// is filled in; preload, env, err, user are kept) and waited for until it listens (and,
// preloaded, publishes its marker).  `mode`: the unix socket file's mode ("" = as made).
Proc echo_server(const Endpoint &e, Spawn base, const std::string &mode = "");
// The preloaded echo server of a case that reads its log: VIPL_DB_LOG=log_level, its
// stderr in dir/server.err.
Proc logging_echo_server(const Endpoint &e, const TempDir &dir, int log_level);
// The preloaded Python program `name` (programs/) on e: the endpoint's arguments, then
// `args`; `env` added, stdout piped, stderr in `err`.
Spawn preloaded_script(const std::string &name, const Endpoint &e,
                       const std::vector<std::string> &args, std::vector<std::string> env,
                       const std::string &err);
// Stops it (SIGTERM) and returns its summary: cancels, bad_cancels, connections, echoed.
std::map<std::string, long> stop_echo_server(Proc &p);

// programs/threaded_client.py with `n` connections of `size` random bytes each (files in
// dir, made from `seed`), started from `base`; returns once every echo came back whole
// and the connections are held open (fails the test after 30 s).
struct EchoClients {
    Proc proc;
    std::vector<std::string> in, out;
};
EchoClients start_echo_clients(const Endpoint &e, const TempDir &dir, int n, size_t size,
                               uint64_t seed, Spawn base);
// Lets them close; requires status 0 and every echo equal to what was sent.
void finish_echo_clients(EchoClients &c);

// `n` socat clients (single-threaded, poll and blocking writes) of an echo server, each
// sending `size` random bytes from its stdin and writing the echo to a file; started
// from `base` (argv filled in), fed, and waited for until every echo came back whole
// (the connections stay open: stdin is not closed yet; fails the test after 30 s).
struct SocatClients {
    std::vector<Proc> procs;
    std::vector<std::string> in, out;
};
SocatClients start_socat_clients(const Endpoint &e, const TempDir &dir, int n, size_t size,
                                 uint64_t seed, Spawn base);
// Closes their stdin; requires status 0 and every echo equal to what was sent.
void finish_socat_clients(SocatClients &c);
// The end of a socat exchange with an echo server: finish_socat_clients, then stops the
// server and requires that it echoed `echoed` bytes in all (nothing lost or doubled).
void finish_socat_echo(SocatClients &c, Proc &server, size_t echoed);
// The --stat rows of all of them (once n rows of role ride over trans: when_riding).
std::vector<StatRow> stat_of(SocatClients &c, size_t n = 0, const std::string &trans = "shm");

} // namespace dbt
