// Where a test's server listens: a unix socket file in the test's directory, or a free
// TCP port on 127.0.0.1, spelled as each program wants it; and the waits and plain
// connections of the test process itself.
//
// Thread rules: thread-safe.  Not async-signal-safe.
#pragma once

#include <string>
#include <vector>

namespace dbt {

struct Endpoint {
    bool is_unix = false;
    std::string path;               // unix socket file
    int port = 0;                   // TCP port
    std::string host = "127.0.0.1"; // TCP address (the server's, to listen on and reach)

    std::string name() const { return is_unix ? "unix" : "tcp"; }
    std::string socat_listen() const;      // UNIX-LISTEN:<path> / TCP4-LISTEN:<port>,bind=...
    std::string socat_connect() const;     // UNIX-CONNECT:<path> / TCP4:127.0.0.1:<port>
    std::vector<std::string> args() const; // the scripts': --unix <path> / --tcp 127.0.0.1:<port>
};

// A unix endpoint in dir ("<dir>/<tag>.sock"), or a TCP port free now.
Endpoint endpoint(bool is_unix, const std::string &dir, const std::string &tag = "server");

// Waits (bounded by ms, failing the test) until something listens on e; when `marked`,
// also until the interposer's marker for it exists (a preloaded listener publishes it
// right after listen(2), see src/marker.h), so that a client started next finds it.
// `pid`: look in that process's network namespace (0: the test's).
void wait_listening(const Endpoint &e, bool marked, int ms = 10000, int pid = 0);

// A blocking kernel connection from the test process (which never runs the
// interposer); -1 and errno when it fails.
int connect_to(const Endpoint &e);

// Reads from fd until `want` bytes came, EOF, an error, or ms passed (poll-bounded).
// *end: 0 still open, 1 EOF, or the errno of the error.
std::string read_for(int fd, size_t want, int ms, int *end);

// Writes all of data (blocking fd); false on an error.
bool send_all(int fd, const std::string &data);

} // namespace dbt
