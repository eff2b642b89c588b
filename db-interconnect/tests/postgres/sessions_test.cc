// psql sessions over the interconnect: rows both ways checked line by line over the unix
// socket and TCP; TLS (sslmode=require) through the stream; peer authentication and
// pg_hba.conf host rules applied to the real client (the kernel's credentials and
// addresses), so that no client gets in as another OS user; pg_stat_activity's
// client_addr and client_port are the client's own.
#include "evidence.h"
#include "psql.h"
#include "workload.h"

#include <catch2/catch.hpp>

using namespace pgt;

TEST_CASE("pg psql sessions over the unix socket and TCP ride shm at both ends", "[pg][sessions]") {
    PgCluster pg;
    for (bool tcp : {false, true}) {
        INFO((tcp ? "TCP 127.0.0.1" : "unix socket"));
        Psql s(pg, tcp ? pg.tcp_conninfo() : pg.unix_conninfo());
        exercise(s);
        // 50,000 rows are ~1.6 MB: they came through the stream, not the kernel.
        require_carried(s.pid(), Role::client, Carrier::shm, 1, 100);
        require_carried(s.backend_pid(), Role::server, Carrier::shm, 1, 100);
        REQUIRE(table(s.pid())[0].bytes_in > 1500000);
        REQUIRE(table(s.backend_pid())[0].bytes_out > 1500000);
        REQUIRE(s.quit() == 0);
    }
}

TEST_CASE("pg sslmode=require: TLS rides the stream", "[pg][sessions]") {
    ClusterConfig c;
    c.ssl = true;
    PgCluster pg(c);
    Psql tls(pg, pg.tcp_conninfo() + " sslmode=require");
    REQUIRE(tls.query("SELECT ssl, version LIKE 'TLSv1.%' FROM pg_stat_ssl "
                      "WHERE pid = pg_backend_pid();") == "t|t");
    exercise(tls);
    require_carried(tls.pid(), Role::client, Carrier::shm, 1, 100);
    require_carried(tls.backend_pid(), Role::server, Carrier::shm, 1, 100);

    // The same server without TLS: the other client's bytes are plain, and ride too.
    Psql clear(pg, pg.tcp_conninfo() + " sslmode=disable");
    REQUIRE(clear.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid();") == "f");
    require_carried(clear.pid(), Role::client, Carrier::shm);
    require_carried(clear.backend_pid(), Role::server, Carrier::shm);
}

TEST_CASE("pg peer authentication and pg_hba.conf host rules see the real client",
          "[pg][sessions][auth]") {
    ClusterConfig c;
    c.listen = "127.0.0.1,::1";
    c.hba = {"local all postgres peer", "local all nobody peer",
             "host all nobody 127.0.0.1/32 reject", "host all all 127.0.0.1/32 trust",
             "host all all ::1/128 reject"};
    PgCluster pg(c);
    pg.sql("CREATE ROLE nobody LOGIN;");

    // The OS user nobody is the role nobody over the unix socket, riding shm (the copy
    // path: the server runs as another user).
    Client as_nobody;
    as_nobody.user = "nobody";
    {
        Psql s(pg, pg.unix_conninfo("nobody"), as_nobody);
        REQUIRE(s.query("SELECT current_user;") == "nobody");
        require_carried(s.pid(), Role::client, Carrier::shm);
        require_carried(s.backend_pid(), Role::server, Carrier::shm);
    }
    // ... and cannot be postgres: the server saw nobody's credentials, not the server's.
    {
        int st = 0;
        std::string out =
            run(pg.client({"psql", "-X", "-d", pg.unix_conninfo("postgres"), "-c", "SELECT 1"},
                          as_nobody),
                20000, &st);
        INFO(out);
        CHECK(st == 2);
        CHECK(out.find("Peer authentication failed for user \"postgres\"") != std::string::npos);
    }
    // Host rules: nobody is refused from 127.0.0.1, everyone from ::1.
    {
        int st = 0;
        std::string out = run(
            pg.client({"psql", "-X", "-d", pg.tcp_conninfo("nobody"), "-c", "SELECT 1"}, as_nobody),
            20000, &st);
        INFO(out);
        CHECK(st == 2);
        CHECK(out.find("pg_hba.conf rejects connection for host \"127.0.0.1\", user \"nobody\"") !=
              std::string::npos);
        out = run(pg.client({"psql", "-X", "-d",
                             "host=::1 port=" + std::to_string(pg.port()) + " user=postgres", "-c",
                             "SELECT 1"}),
                  20000, &st);
        INFO(out);
        CHECK(st == 2);
        CHECK(out.find("pg_hba.conf rejects connection for host \"::1\"") != std::string::npos);
    }
    // pg_stat_activity: the client's own address and port, as its socket has them.
    {
        Psql s(pg, pg.tcp_conninfo());
        std::string got = s.query("SELECT client_addr, client_port FROM pg_stat_activity "
                                  "WHERE pid = pg_backend_pid();");
        int port = local_port_to(s.pid(), pg.port());
        REQUIRE(port > 0);
        REQUIRE(got == "127.0.0.1|" + std::to_string(port));
        require_carried(s.pid(), Role::client, Carrier::shm);
        require_carried(s.backend_pid(), Role::server, Carrier::shm);
        REQUIRE(row_to(s.backend_pid(), Role::server, ":" + std::to_string(port)).fd >= 0);
    }
}
