// The vipl extension (pg_stat_vipl) in real PostgreSQL 15 servers: installed by ctest's
// setup test (make install of PGXS), created with CREATE EXTENSION, queried from the very
// session it must show.
#include "server.h"

#include <catch2/catch.hpp>

#include <unistd.h>

using namespace pgt;

namespace {

void require_installed() {
    std::string control = std::string(VIPL_PG_SHAREDIR) + "/extension/vipl.control";
    INFO(control << " is missing: the setup test installs it (ctest -R 'db:')");
    REQUIRE(access(control.c_str(), R_OK) == 0);
}

// The session's own backend row: role|transport|bytes_in>0|bytes_out>0, joined with
// pg_stat_activity on pid.
const char *kOwnRow = "SELECT v.role, v.transport, v.bytes_in > 0, v.bytes_out > 0, "
                      "a.backend_type FROM pg_stat_vipl v JOIN pg_stat_activity a USING (pid) "
                      "WHERE pid = pg_backend_pid()";

} // namespace

TEST_CASE("pg_stat_vipl: a psql session's backend rides shm, dblink's connection is a client "
          "row") {
    require_installed();
    Server s;
    Psql psql(s, {});
    REQUIRE(psql.query("CREATE EXTENSION vipl").empty());
    {
        INFO(s.log());
        CHECK(psql.query(kOwnRow) == std::vector<std::string>{"server|shm|t|t|client backend"});
    }
    // A backend's own libpq connection to a server (dblink here; postgres_fdw, PL/Proxy and
    // walreceiver connect the same way) is a client row of that backend, and the backend
    // it reaches has the server row.
    REQUIRE(psql.query("CREATE EXTENSION dblink").empty());
    std::string conn = "host=" + s.socket_dir() + " port=" + std::to_string(s.port()) +
                       " dbname=postgres user=postgres";
    REQUIRE(psql.value("SELECT dblink_connect('c', '" + conn + "')") == "OK");
    REQUIRE(psql.value("SELECT x FROM dblink('c', 'SELECT 7') AS t(x int)") == "7");
    std::string other = psql.value("SELECT * FROM dblink('c', 'SELECT pg_backend_pid()') AS "
                                   "t(p int)");
    INFO(s.log());
    CHECK(psql.query("SELECT role, transport, bytes_out > 0 FROM pg_stat_vipl WHERE pid = "
                     "pg_backend_pid() ORDER BY role") ==
          std::vector<std::string>{"client|shm|t", "server|shm|t"});
    CHECK(psql.query("SELECT role, transport, bytes_in > 0 FROM pg_stat_vipl WHERE pid = " +
                     other) == std::vector<std::string>{"server|shm|t"});
    // Every row's process is one of the server's, as pg_stat_activity knows it.
    CHECK(psql.value("SELECT count(*) FROM pg_stat_vipl WHERE pid NOT IN (SELECT pid FROM "
                     "pg_stat_activity)") == "0");
}

TEST_CASE("pg_stat_vipl: across network namespaces the session's backend rides tcp") {
    require_installed();
    NetnsSession ns;
    Psql &psql = ns.psql;
    REQUIRE(psql.query("CREATE EXTENSION vipl").empty());
    INFO(ns.server.log());
    CHECK(psql.query(kOwnRow) == std::vector<std::string>{"server|tcp|t|t|client backend"});
    CHECK(psql.value("SELECT peer LIKE '" + ns.net.address(1) +
                     ":%' FROM pg_stat_vipl WHERE "
                     "pid = pg_backend_pid()") == "t");
}

TEST_CASE("pg_stat_vipl: a server started without the interposer shows no rows") {
    require_installed();
    Server s(plain_server());
    Psql psql(s, {}); // interposed, but its server publishes no marker: it stays a socket
    REQUIRE(psql.query("CREATE EXTENSION vipl").empty());
    CHECK(psql.value("SELECT count(*) FROM pg_stat_vipl") == "0");
    CHECK(psql.value("SELECT count(*) FROM pg_stat_activity WHERE pid = pg_backend_pid()") == "1");
}

TEST_CASE("pg_stat_vipl: only readers of all statistics may see it") {
    require_installed();
    Server s;
    Psql psql(s, {});
    REQUIRE(psql.query("CREATE EXTENSION vipl").empty());
    REQUIRE(psql.query("CREATE ROLE plain_user").empty());
    REQUIRE(psql.query("SET ROLE plain_user").empty());
    std::vector<std::string> denied = psql.query("SELECT count(*) FROM pg_stat_vipl");
    REQUIRE(denied.size() == 1);
    CHECK(denied[0].find("permission denied") != std::string::npos);
    REQUIRE(psql.query("RESET ROLE").empty());
    REQUIRE(psql.query("GRANT pg_read_all_stats TO plain_user").empty());
    REQUIRE(psql.query("SET ROLE plain_user").empty());
    CHECK(psql.value("SELECT count(*) FROM pg_stat_vipl WHERE pid = pg_backend_pid()") == "1");
}
