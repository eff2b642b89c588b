// The tests' Python programs (programs/*.py), started and checked the same way by every
// test that uses them.
//
// Thread rules: a test's thread.  Not async-signal-safe.
#pragma once

#include "endpoint.h"
#include "files.h"
#include "process.h"

#include <map>
#include <string>
#include <vector>

namespace dbt {

// The asyncio echo server (programs/echo_server.py) on e, started from `base` (its argv
// is filled in; preload, env, err, user are kept) and waited for until it listens (and,
// preloaded, publishes its marker).  `mode`: the unix socket file's mode ("" = as made).
Proc echo_server(const Endpoint &e, Spawn base, const std::string &mode = "");
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

} // namespace dbt
