// Descriptors running out.  A client whose limit leaves too few descriptors for a stream
// keeps its connection on the kernel (both ends), and its results are right at every
// limit; from some limit on it rides shm.  Backends whose limit PostgreSQL's file cache
// fills (max_files_per_process above the limit, 200 tables read by every session) keep
// serving their clients over the stream, and a dblink connection made by such a backend
// works, on a stream or on the kernel, the two ends agreeing.
#include "evidence.h"
#include "psql.h"

#include <catch2/catch.hpp>

using namespace pgt;

namespace {

// What carries process pid's connection of `role` ("none" without a table or a row).
Carrier carrier_of(int pid, Role role) {
    std::vector<StatRow> rows;
    if (!vipl::db::test::stat_rows(pid, &rows)) return Carrier::none;
    for (const StatRow &r : rows)
        if (r.server == (role == Role::server)) return r.carrier;
    return Carrier::none;
}

bool on_stream(Carrier c) {
    return c == Carrier::shm || c == Carrier::tcp;
}

} // namespace

TEST_CASE("pg faults: fds running out in a client: the connection stays on the kernel below what "
          "a stream needs, results always right",
          "[pg][faults][fds]") {
    // A client that cannot make its stream after the server's REPLY leaves the server
    // waiting for it until the rendezvous's deadline (2 x VIPL_DB_NEGOTIATE_MS, 4 s by
    // default) before its first answer: shortened here on both ends.
    const std::string negotiate = "VIPL_DB_NEGOTIATE_MS=250";
    ClusterConfig cc;
    cc.env = {negotiate};
    PgCluster pg(cc);
    bool fell_back = false, rode = false;
    for (long limit : {4, 6, 8, 12, 16, 20, 24, 28, 32, 48, 64}) {
        INFO("RLIMIT_NOFILE " << limit);
        Client c;
        c.nofile = limit;
        c.env = {negotiate};
        Psql s(pg, pg.tcp_conninfo(), c);
        REQUIRE(s.query("SELECT sum(i) FROM generate_series(1, 100000) i;") == "5000050000");
        Carrier client = carrier_of(s.pid(), Role::client);
        Carrier server = carrier_of(s.backend_pid(), Role::server);
        INFO("client " << vipl::db::test::carrier_name(client) << ", backend "
                       << vipl::db::test::carrier_name(server));
        // Both ends agree, and once a limit lets the connection ride, every higher one does.
        REQUIRE(on_stream(client) == on_stream(server));
        if (on_stream(client)) {
            rode = true;
            require_carried(s.pid(), Role::client, Carrier::shm);
            require_carried(s.backend_pid(), Role::server, Carrier::shm);
        } else {
            REQUIRE_FALSE(rode);
            fell_back = true;
        }
        REQUIRE(s.quit() == 0);
    }
    CHECK(fell_back);
    CHECK(rode);
}

namespace {

// An instance whose descriptor limit (100) is below max_files_per_process (1000), so
// that PostgreSQL's file cache fills it, with 200 one-row tables; the query that reads
// them all, and its result.
struct Crowded {
    std::unique_ptr<PgCluster> pg;
    std::string touch = "SELECT sum(n) FROM (";
    explicit Crowded(bool vipl) {
        ClusterConfig c;
        c.vipl = vipl;
        c.nofile = 100;
        c.conf = {"max_files_per_process = 1000"};
        pg = std::make_unique<PgCluster>(c);
        std::string make;
        for (int i = 1; i <= 200; ++i) {
            std::string t = "t" + std::to_string(i);
            make += "CREATE TABLE " + t + "(a int); INSERT INTO " + t + " VALUES (" +
                    std::to_string(i) + ");";
            touch += (i > 1 ? " UNION ALL SELECT a FROM " : "SELECT a AS n FROM ") + t;
        }
        touch += ") x;";
        pg->sql(make + "CREATE EXTENSION dblink;");
    }
};

} // namespace

TEST_CASE("pg faults: fds running out in the backends: the file cache fills the limit, the "
          "streams serve on",
          "[pg][faults][fds]") {
    Crowded a(true);
    std::vector<std::unique_ptr<Psql>> sessions;
    for (int i = 0; i < 4; ++i) {
        sessions.push_back(
            std::make_unique<Psql>(*a.pg, i % 2 ? a.pg->tcp_conninfo() : a.pg->unix_conninfo()));
        // Serial plans: a parallel query's shared memory segment is among what fails at
        // the limit (the known fault below).
        sessions.back()->query("SET max_parallel_workers_per_gather = 0;");
    }
    for (int round = 0; round < 2; ++round)
        for (auto &s : sessions) REQUIRE(s->query(a.touch) == "20100");
    for (auto &s : sessions) {
        INFO("backend " << s->backend_pid() << " holds " << fd_count(s->backend_pid())
                        << " descriptors of 100");
        CHECK(fd_count(s->backend_pid()) >= 90); // its file cache filled the limit
        require_carried(s->pid(), Role::client, Carrier::shm, 1, 500);
        require_carried(s->backend_pid(), Role::server, Carrier::shm, 1, 500);
    }
    INFO(a.pg->log());
    CHECK(a.pg->log().find("terminated by signal") == std::string::npos);
}

// A known fault, not run by ctest (hidden): it fails until the interposer leaves
// PostgreSQL the descriptors PostgreSQL counted on.  PostgreSQL counts the descriptors it
// may use when the postmaster starts and keeps a reserve for what it opens outside its
// file cache; the interposer's own descriptors (a stream's, the process's first
// connection's) come out of that reserve unseen.  At the limit, a parallel query's
// shared memory segment, a library and a dblink connection's socket then fail with
// EMFILE where the same instance without the interposer succeeds.
TEST_CASE("pg known fault: at the descriptor limit PostgreSQL's reserve is gone",
          "[.known-fault]") {
    for (bool vipl : {false, true}) {
        INFO((vipl ? "under the interposer" : "plain"));
        Crowded a(vipl);
        PgCluster b;
        Client c;
        c.vipl = vipl;
        Psql s(*a.pg, a.pg->unix_conninfo(), c);
        CHECK(s.query(a.touch) == "20100"); // a parallel plan: its DSM segment
        s.query("SET max_parallel_workers_per_gather = 0;");
        REQUIRE(s.query(a.touch) == "20100");
        CHECK(s.query("SELECT dblink_connect('b', '" + b.tcp_conninfo() + "');") == "OK");
        CHECK(s.query("SELECT n FROM dblink('b', 'SELECT 42') AS t(n int);") == "42");
    }
}
