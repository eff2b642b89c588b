// A throw-away PostgreSQL 15 server for a test, and an interactive psql session on it.
//
// The server runs as `postgres` in a fresh data directory under /tmp, on a port of its
// own, its socket in that directory; with the interposer it is started as
// `vipl-run pg_ctl -D DIR -l LOG -w start`, without as plain `pg_ctl`.  The destructor
// stops it (immediate mode) and removes everything.
#pragma once

#include "harness.h"
#include "netns.h"

#include <memory>
#include <string>
#include <vector>

namespace pgt {

struct ServerOptions {
    bool vipl = true;             // started with vipl-run
    std::string netns;            // a network namespace file to run in ("": ours)
    std::string listen;           // listen_addresses ("": the unix socket only)
    std::vector<std::string> env; // more environment for pg_ctl and the server
};

// A server started without the interposer.
inline ServerOptions plain_server() {
    ServerOptions o;
    o.vipl = false;
    return o;
}

class Server {
public:
    explicit Server(const ServerOptions &o = {}); // initdb and start; REQUIREs both
    ~Server();
    Server(const Server &) = delete;
    Server &operator=(const Server &) = delete;

    void stop(); // REQUIREs a clean fast shutdown
    int port() const { return port_; }
    const std::string &socket_dir() const { return dir_.path(); }
    std::string data_dir() const { return dir_.path() + "/data"; }
    std::string log() const { return read_text(dir_.path() + "/log"); }
    const ServerOptions &options() const { return o_; }

private:
    void halt(); // immediate shutdown, else SIGKILL by the pid file
    ServerOptions o_;
    TempDir dir_{"postgres"};
    int port_ = 0;
    bool running_ = false;
};

// psql -X -q -A -t as `postgres` (under vipl-run when asked), fed one query at a time.
class Psql {
public:
    struct Options {
        bool vipl = true;
        std::string host;  // "": the server's socket directory
        std::string netns; // "": ours
        std::vector<std::string> env;
        std::string log; // the server's log file, shown when the session fails
    };
    Psql(const Server &s, Options o) : Psql(s.port(), with_host(s, std::move(o))) {}
    Psql(int port, const Options &o); // REQUIREs a working session
    ~Psql();
    Psql(const Psql &) = delete;
    Psql &operator=(const Psql &) = delete;

    // The output lines of sql (rows as a|b|c, errors as psql prints them), within 30 s.
    std::vector<std::string> query(const std::string &sql);
    // The single value sql returns (REQUIREs exactly one line).
    std::string value(const std::string &sql);
    int backend_pid() const { return backend_pid_; }

private:
    static Options with_host(const Server &s, Options o) {
        if (o.host.empty()) o.host = s.socket_dir();
        if (o.log.empty()) o.log = s.socket_dir() + "/log";
        return o;
    }
    int pid_ = -1, to_ = -1, from_ = -1;
    std::string buf_, log_;
    int backend_pid_ = 0;
};

// A server in side 0 of net and a session from side 1: both interposed, with
// VIPL_DB_REMOTE naming the server, so the session rides the tcp provider.
ServerOptions netns_server(const vt::NetnsPair &net);
Psql::Options netns_session(const vt::NetnsPair &net);

// Both of those at once, as the tcp cases use them: a fresh namespace pair (REQUIREd,
// the message saying why it could not be made), its server and its session.  Members are
// made in this order and undone in reverse, the session first.
struct NetnsSession {
    NetnsSession();
    NetnsSession(const NetnsSession &) = delete;
    NetnsSession &operator=(const NetnsSession &) = delete;

private:
    std::string why_; // filled by the pair when it cannot be made

public:
    vt::NetnsPair net;
    Server server;
    Psql psql;
};

} // namespace pgt
