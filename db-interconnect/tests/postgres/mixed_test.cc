// Mixed deployments: a plain psql to a server under the interposer and a psql under the
// interposer to a plain server (both stay on the kernel, nothing is ever written that
// the other side did not ask for, results are right); a client that runs as another OS
// user than the server (the copy path: the server cannot read the client's memory);
// 1,000 connect/disconnect cycles (pgbench -C) that ride vipl every time and leave
// nothing behind in pgbench or the postmaster.
#include "evidence.h"
#include "psql.h"
#include "workload.h"

#include <catch2/catch.hpp>

using namespace pgt;

TEST_CASE("pg mixed: plain psql to a server under the interposer", "[pg][mixed]") {
    PgCluster pg;
    Client plain;
    plain.vipl = false;
    for (bool tcp : {false, true}) {
        INFO((tcp ? "TCP 127.0.0.1" : "unix socket"));
        Psql s(pg, tcp ? pg.tcp_conninfo() : pg.unix_conninfo(), plain);
        exercise(s);
        REQUIRE_FALSE(has_table(s.pid()));
        require_not_carried(s.backend_pid(), Role::server);
    }
    // A client under the interposer still rides beside them.
    Psql v(pg, pg.tcp_conninfo());
    require_carried(v.backend_pid(), Role::server, Carrier::shm);
}

TEST_CASE("pg mixed: psql under the interposer to a plain server", "[pg][mixed]") {
    ClusterConfig c;
    c.vipl = false;
    PgCluster pg(c);
    for (bool tcp : {false, true}) {
        INFO((tcp ? "TCP 127.0.0.1" : "unix socket"));
        Psql s(pg, tcp ? pg.tcp_conninfo() : pg.unix_conninfo());
        exercise(s);
        require_not_carried(s.pid(), Role::client);
        REQUIRE_FALSE(has_table(s.backend_pid()));
    }
    // Nothing but PostgreSQL's protocol reached the server.
    INFO(pg.log());
    CHECK(pg.log().find("invalid length of startup packet") == std::string::npos);
    CHECK(pg.log().find("unsupported frontend protocol") == std::string::npos);
}

TEST_CASE("pg mixed: a client running as another OS user than the server (the copy path)",
          "[pg][mixed]") {
    PgCluster pg;
    pg.sql("CREATE ROLE nobody LOGIN SUPERUSER;");
    Client as_nobody;
    as_nobody.user = "nobody";
    const std::string in = pg.file("in.copy"), out = pg.file("out.copy");
    write_copy_file(in, 20u << 20);
    const Digest sent = digest_of(in);
    write_file(out, "", "nobody", 0644);
    for (bool tcp : {false, true}) {
        INFO((tcp ? "TCP 127.0.0.1" : "unix socket"));
        Psql s(pg, tcp ? pg.tcp_conninfo("nobody") : pg.unix_conninfo("nobody"), as_nobody);
        REQUIRE(s.query("SELECT current_user, (SELECT usename FROM pg_stat_activity "
                        "WHERE pid = pg_backend_pid());") == "nobody|nobody");
        exercise(s);
        s.query("CREATE TEMP TABLE c(id int, payload text);");
        s.query("\\copy c FROM '" + in + "'", 60000);
        s.query("SET work_mem = '256MB';");
        s.query("\\copy (SELECT * FROM c ORDER BY id) TO '" + out + "'", 60000);
        REQUIRE(digest_of(out) == sent);
        require_carried(s.pid(), Role::client, Carrier::shm, 1, sent.size);
        require_carried(s.backend_pid(), Role::server, Carrier::shm, 1, sent.size);
    }
}

TEST_CASE("pg mixed: 1,000 connect/disconnect cycles ride vipl and leak nothing", "[pg][mixed]") {
    PgCluster pg;
    write_file(pg.file("select1.sql"), "SELECT 1;\n", "postgres", 0644);
    const int pm = pg.postmaster_pid();
    const Footprint before = postmaster_baseline(pg);

    Client c;
    c.env = {"VIPL_DB_LOG=2"};
    Launch l = pg.client({"pgbench", "-n", "-C", "-c", "1", "-j", "1", "-t", "1000", "-f",
                          pg.file("select1.sql"), pg.unix_conninfo()},
                         c);
    l.out_pipe = true;
    Program bench(l);
    // pgbench's own descriptors, memfds and mappings early in the run and late in it: a
    // connection open at either look costs up to 8 descriptors; a leak of one per cycle
    // would cost hundreds.  Late: the smallest of the later looks, as a leak raises the
    // floor, while a loaded host may catch a closing connection beside a new one.
    Footprint early, late;
    int riding = 0, looks = 0;
    uint64_t deadline = now_ns() + 120'000'000'000ull;
    while (bench.running() && now_ns() < deadline) {
        Footprint f = footprint(bench.pid());
        if (f.fds > 0 && looks++ == 5)
            early = f;
        else if (f.fds > 0 && looks > 6 && (late.fds == 0 || f.fds < late.fds))
            late = f;
        std::vector<StatRow> rows;
        if (vipl::db::test::stat_rows(bench.pid(), &rows))
            for (const StatRow &r : rows) riding += r.carrier == Carrier::shm;
        bench.wait(5);
    }
    int st = bench.wait(1000);
    const std::string &out = bench.output();
    INFO(out.substr(out.size() > 3000 ? out.size() - 3000 : 0));
    REQUIRE(st == 0);
    REQUIRE(out.find("number of transactions actually processed: 1000/1000") != std::string::npos);
    // Every connection's decision, as the interposer logs it (VIPL_DB_LOG=2).
    int shm = 0, kernel = 0;
    for (size_t at = out.find("rides vipl (shm)"); at != std::string::npos;
         at = out.find("rides vipl (shm)", at + 1))
        ++shm;
    for (size_t at = out.find("stays on the kernel"); at != std::string::npos;
         at = out.find("stays on the kernel", at + 1))
        ++kernel;
    CHECK(shm >= 1000); // and pgbench's first connection, which looks at the server
    CHECK(kernel == 0);
    // The counters saw the connections ride while they were open.
    CHECK(riding > 0);
    INFO("pgbench early: " << describe(early) << "\nlate: " << describe(late));
    // Looks slow down on a loaded host: the early one comes soon, so that most cycles
    // fall between the two (a leak of one descriptor per cycle would show hundreds).
    REQUIRE(looks > 15);
    CHECK(late.fds <= early.fds + 10);
    CHECK(late.memfds <= early.memfds + 4);
    CHECK(late.maps <= early.maps + 16);
    require_footprint(pm, before);
}
