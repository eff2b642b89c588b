// A real PostgreSQL 15 instance that a test makes, starts and always takes back: a data
// directory made by initdb as the postgres user (or a pg_basebackup of another instance:
// a standby), its postgresql.conf and pg_hba.conf written by the test, a port of its own
// (never 5432) and its unix socket in the test's folder, started with `pg_ctl start`
// under vipl-run (or plain).  The destructor stops it (immediate), kills whatever of it
// is left, reaps its processes and removes the folder, failed test or not.
//
// Every process of the instance (initdb, pg_ctl, the postmaster, and the clients made
// with client()) runs in the instance's network namespace when it has one.
//
// Thread rules: one thread.  Not async-signal-safe.
#pragma once

#include "evidence.h"
#include "program.h"
#include "scratch.h"

#include <string>
#include <vector>

namespace pgt {

// How a client program of an instance runs.
struct Client {
    bool vipl = true;              // under vipl-run
    std::string user = "postgres"; // the OS user
    std::string netns;             // "" = the instance's namespace
    std::vector<std::string> env;  // NAME=VALUE added
    long nofile = 0;               // RLIMIT_NOFILE (0: as the test's)
};

struct ClusterConfig {
    bool vipl = true;                 // the postmaster under vipl-run
    std::string netns;                // namespace file ("" = the test's)
    std::vector<std::string> env;     // the server's NAME=VALUE (VIPL_DB_REMOTE=...)
    long nofile = 0;                  // the server's RLIMIT_NOFILE (0: as the test's)
    std::string listen = "127.0.0.1"; // listen_addresses
    std::vector<std::string> conf;    // postgresql.conf lines after ours
    std::vector<std::string> hba;     // pg_hba.conf; empty: trust on unix, loopback,
                                      // 10.0.0.0/8 (namespaces), replication too
    bool ssl = false;                 // ssl = on, a self-signed certificate (openssl req)
    std::string base_backup_of;       // a conninfo: the data directory is a
                                      // pg_basebackup of that server, with standby.signal
    bool start = true;                // start it in the constructor
};

class PgCluster {
public:
    // Makes (initdb or pg_basebackup), configures and (unless !c.start) starts an
    // instance; fails the test with the tool's output when a step fails.
    explicit PgCluster(ClusterConfig c = {});
    ~PgCluster();
    PgCluster(const PgCluster &) = delete;
    PgCluster &operator=(const PgCluster &) = delete;

    // pg_ctl start -w (under vipl-run when configured), stop -m mode, restart -m fast.
    void start();
    void stop(const std::string &mode = "fast");
    void restart();

    int port() const { return port_; }
    // The first of listen_addresses, and the unix socket folder.
    const std::string &host() const { return host_; }
    std::string socket_dir() const { return scratch_.file("sock"); }
    std::string data_dir() const { return scratch_.file("data"); }
    std::string file(const std::string &name) const { return scratch_.file(name); }
    const ClusterConfig &config() const { return cfg_; }
    // Connection strings: over TCP to host(), or over the unix socket.
    std::string tcp_conninfo(const std::string &user = "postgres",
                             const std::string &db = "postgres") const;
    std::string unix_conninfo(const std::string &user = "postgres",
                              const std::string &db = "postgres") const;
    // The postmaster's pid (postmaster.pid), -1 when it is not running.
    int postmaster_pid() const;
    std::string log() const;
    // For a standby: what the connection tables of pg_basebackup (and the child that
    // streams its WAL) showed while it ran.
    const std::vector<Seen> &base_backup_seen() const { return backup_seen_; }

    // A one-off statement run by a plain psql as postgres over the unix socket (set-up and
    // checks, not what a test measures); its rows unaligned, tuples only, trimmed.
    // Fails the test when psql fails.
    std::string sql(const std::string &query, const std::string &db = "postgres");
    // Waits up to ms for `query` to print `want`; whether it did.
    bool await_sql(const std::string &query, const std::string &want, int ms,
                   const std::string &db = "postgres");

    // A Launch of a client program of this instance (its namespace, the client's user,
    // the interposer when c.vipl).
    Launch client(const std::vector<std::string> &argv, const Client &c = {}) const;
    // A Launch of a tool run as postgres in the instance's place (initdb, pg_ctl, ...).
    Launch tool(const std::vector<std::string> &argv, bool vipl = false) const;

private:
    void make_data();
    void write_config();
    void reap_postmaster(int ms);
    // Runs a pg_ctl command that starts the postmaster; fails the test when it fails.
    void run_server_ctl(const std::vector<std::string> &argv);
    ClusterConfig cfg_;
    Scratch scratch_;
    int port_ = 0;
    std::string host_;
    int pm_pid_ = -1;
    std::vector<Seen> backup_seen_;
};

} // namespace pgt
