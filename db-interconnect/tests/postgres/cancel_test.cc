// Cancelling and ending a query whose session rides vipl: SIGINT to psql during pg_sleep
// (psql's handler sends the cancel request with PQcancel, from the signal handler, on a
// new connection that stays on the kernel), pg_cancel_backend and statement_timeout
// (the backend cancels itself), pg_terminate_backend (the backend ends the connection).
// A cancelled session goes on riding vipl.
#include "evidence.h"
#include "psql.h"

#include <catch2/catch.hpp>

#include <signal.h>

using namespace pgt;

namespace {

constexpr char kCancelled[] = "canceling statement due to user request";

// The session works on and still rides shm at both ends.
void still_riding(Psql &s) {
    REQUIRE(s.query("SELECT 6 * 7;") == "42");
    require_carried(s.pid(), Role::client, Carrier::shm);
    require_carried(s.backend_pid(), Role::server, Carrier::shm);
}

} // namespace

TEST_CASE("pg cancel: SIGINT to psql during pg_sleep cancels the query", "[pg][cancel]") {
    PgCluster pg;
    for (bool tcp : {false, true}) {
        INFO((tcp ? "TCP 127.0.0.1" : "unix socket"));
        // Interactive (a terminal), as a user's psql: one reading a script ends the script
        // on SIGINT instead.
        Psql s(pg, tcp ? pg.tcp_conninfo() : pg.unix_conninfo(), Client{}, true);
        require_carried(s.backend_pid(), Role::server, Carrier::shm);
        for (int round = 0; round < 3; ++round) {
            s.send("SELECT pg_sleep(60);");
            await_sleeping(pg, s.backend_pid());
            s.program().signal(SIGINT);
            uint64_t t1 = s.expect(kCancelled, 10000);
            INFO("psql printed: " << s.since_send());
            REQUIRE(t1 != 0);
            REQUIRE(s.program().running());
            still_riding(s);
        }
    }
}

TEST_CASE("pg cancel: pg_cancel_backend and statement_timeout", "[pg][cancel]") {
    PgCluster pg;
    Psql victim(pg, pg.tcp_conninfo());
    Psql other(pg, pg.unix_conninfo());

    victim.send("SELECT pg_sleep(60);");
    await_sleeping(pg, victim.backend_pid());
    REQUIRE(other.query("SELECT pg_cancel_backend(" + std::to_string(victim.backend_pid()) +
                        ");") == "t");
    REQUIRE(victim.expect(kCancelled, 10000) != 0);
    still_riding(victim);
    still_riding(other);

    victim.query("SET statement_timeout = '300ms';");
    uint64_t t0 = now_ns();
    std::string out = victim.query("SELECT pg_sleep(30);", 10000);
    uint64_t took_ms = (now_ns() - t0) / 1000000;
    INFO(out);
    REQUIRE(out.find("canceling statement due to statement timeout") != std::string::npos);
    REQUIRE(took_ms >= 300);
    REQUIRE(took_ms < 5000);
    victim.query("RESET statement_timeout;");
    still_riding(victim);
}

TEST_CASE("pg cancel: pg_terminate_backend ends the session the usual way", "[pg][cancel]") {
    PgCluster pg;
    Psql victim(pg, pg.tcp_conninfo());
    Psql other(pg, pg.unix_conninfo());
    int backend = victim.backend_pid();
    require_carried(victim.pid(), Role::client, Carrier::shm);
    require_carried(backend, Role::server, Carrier::shm);
    victim.send("SELECT pg_sleep(60);");
    await_sleeping(pg, backend);
    REQUIRE(other.query("SELECT pg_terminate_backend(" + std::to_string(backend) + ");") == "t");
    REQUIRE(victim.expect("terminating connection due to administrator command", 10000) != 0);
    // A psql reading a script gives up on a lost connection: exit status 2.
    REQUIRE(victim.program().wait(10000) == 2);
    INFO(victim.program().output());
    REQUIRE(victim.saw("connection to server was lost"));
    REQUIRE(wait_gone(backend, 5000));
    still_riding(other);
    REQUIRE(pg.sql("SELECT count(*) FROM pg_stat_activity WHERE pid = " + std::to_string(backend) +
                   ";") == "0");
}
