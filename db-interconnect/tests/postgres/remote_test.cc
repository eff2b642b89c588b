// One instance talking to another over the interconnect: postgres_fdw, dblink and
// PL/Proxy from instance A's backend to instance B, and streaming replication
// (pg_basebackup, then a standby whose walreceiver connects with primary_conninfo).
// On one host the connections ride shm; between two network namespaces (two "hosts"
// joined by a veth pair, both ends naming the server in VIPL_DB_REMOTE) they ride the
// tcp provider.  The evidence is in the processes that make and serve the connections:
// A's backend lists its three client connections, B's three backends their server
// ends; the walreceiver its client end, the walsender its server end.
#include "evidence.h"
#include "hosts.h"
#include "psql.h"
#include "workload.h"

#include <catch2/catch.hpp>

#include <memory>
#include <sstream>

using namespace pgt;

namespace {

// Where the two instances run.
struct Place {
    std::unique_ptr<Hosts> hosts; // null: one host
    ClusterConfig config(int side) const {
        ClusterConfig c;
        if (hosts) {
            c.netns = hosts->ns(side);
            c.listen = side == 1 ? hosts->ip(1) : "127.0.0.1";
            c.env = {hosts->remote_rule(1)}; // both ends name the server (side 1)
        }
        return c;
    }
    Carrier carrier() const { return hosts ? Carrier::tcp : Carrier::shm; }
};

Place one_host() {
    return Place{};
}
Place two_hosts() {
    Place p;
    p.hosts = std::make_unique<Hosts>();
    return p;
}

std::vector<int> other_backends(PgCluster &pg) {
    std::vector<int> pids;
    std::istringstream s(pg.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = "
                                "'client backend' AND pid <> pg_backend_pid() ORDER BY pid;"));
    for (int pid; s >> pid;) pids.push_back(pid);
    return pids;
}

void fdw_dblink_plproxy(const Place &place) {
    PgCluster b(place.config(1));
    PgCluster a(place.config(0));
    const Carrier via = place.carrier();
    b.sql("CREATE TABLE items(id int PRIMARY KEY, v text);"
          "INSERT INTO items SELECT i, md5(i::text) FROM generate_series(1, 1000) i;"
          "CREATE FUNCTION add_item(i int, t text) RETURNS int "
          "AS $$ INSERT INTO items VALUES (i, t) RETURNING id $$ LANGUAGE sql;");
    // Over TCP to B's address; dblink over B's unix socket on one host.
    const std::string b_tcp = b.tcp_conninfo();
    const std::string b_dblink = place.hosts ? b_tcp : b.unix_conninfo();
    a.sql("CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink; CREATE EXTENSION plproxy;"
          "CREATE SERVER b FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '" +
          b.host() + "', port '" + std::to_string(b.port()) +
          "', dbname 'postgres');"
          "CREATE USER MAPPING FOR postgres SERVER b OPTIONS (user 'postgres');"
          "CREATE FOREIGN TABLE items_b (id int, v text) SERVER b OPTIONS (table_name 'items');"
          "CREATE FUNCTION b_count() RETURNS bigint AS $$ CONNECT '" +
          b_tcp +
          "'; SELECT count(*) FROM items; $$ LANGUAGE plproxy;"
          "CREATE FUNCTION add_item(i int, t text) RETURNS int AS $$ CONNECT '" +
          b_tcp + "'; $$ LANGUAGE plproxy;");

    Psql s(a, a.unix_conninfo());
    REQUIRE(s.query("SELECT count(*), sum(id), sum(length(v)) FROM items_b "
                    "WHERE random() >= 0;") == "1000|500500|32000");
    s.query("INSERT INTO items_b SELECT i, 'fdw' FROM generate_series(1001, 1100) i;");
    REQUIRE(s.query("SELECT dblink_connect('bconn', '" + b_dblink + "');") == "OK");
    REQUIRE(
        s.query("SELECT n FROM dblink('bconn', 'SELECT count(*) FROM items') AS t(n bigint);") ==
        "1100");
    REQUIRE(s.query("SELECT add_item(5000, 'proxy');") == "5000");
    REQUIRE(s.query("SELECT b_count();") == "1101");
    REQUIRE(b.sql("SELECT count(*), count(*) FILTER (WHERE v = 'fdw'), "
                  "count(*) FILTER (WHERE v = 'proxy') FROM items;") == "1101|100|1");

    // The three connections stay open in A's backend (postgres_fdw's and PL/Proxy's
    // caches, dblink's named connection): A's backend is their client, B's backends
    // their servers, all riding vipl.
    require_carried(s.pid(), Role::client, Carrier::shm);
    require_carried(s.backend_pid(), Role::server, Carrier::shm);
    require_carried(s.backend_pid(), Role::client, via, 3, 50);
    std::vector<int> served = other_backends(b);
    REQUIRE(served.size() == 3);
    for (int pid : served) require_carried(pid, Role::server, via, 1, 50);
    if (place.hosts) {
        // B sees A's address as the client's: the kernel connection crossed the link.
        REQUIRE(b.sql("SELECT DISTINCT host(client_addr) FROM pg_stat_activity WHERE "
                      "backend_type = 'client backend' AND pid <> pg_backend_pid();") ==
                place.hosts->ip(0));
    }
}

void streaming_replication(const Place &place) {
    PgCluster primary(place.config(1));
    const Carrier via = place.carrier();
    primary.sql("CREATE TABLE r(id int PRIMARY KEY, v text);"
                "INSERT INTO r SELECT i, md5(i::text) FROM generate_series(1, 1000) i;");
    ClusterConfig sc = place.config(0);
    sc.base_backup_of = primary.tcp_conninfo();
    sc.conf = {"primary_conninfo = '" + primary.tcp_conninfo() + " application_name=vipl_standby'",
               "hot_standby = on"};
    PgCluster standby(sc);

    // pg_basebackup's copy of the data directory (~30 MB) rode vipl.
    {
        uint64_t most = 0;
        for (const Seen &x : standby.base_backup_seen())
            if (!x.row.server && x.row.carrier == via) most = std::max(most, x.row.bytes_in);
        INFO(describe(standby.base_backup_seen()));
        REQUIRE(most > (8u << 20));
    }
    INFO("primary log:\n" << primary.log() << "\nstandby log:\n" << standby.log());
    REQUIRE(primary.await_sql("SELECT state FROM pg_stat_replication WHERE application_name = "
                              "'vipl_standby';",
                              "streaming", 30000));
    REQUIRE(standby.sql("SELECT count(*) FROM r;") == "1000");
    primary.sql("INSERT INTO r SELECT i, md5(i::text) FROM generate_series(1001, 3000) i;"
                "UPDATE r SET v = 'changed' WHERE id % 10 = 0;");
    REQUIRE(standby.await_sql("SELECT count(*), count(*) FILTER (WHERE v = 'changed'), "
                              "sum(id) FROM r;",
                              "3000|300|4501500", 30000));

    int receiver = std::atoi(standby.sql("SELECT pid FROM pg_stat_wal_receiver;").c_str());
    int sender = std::atoi(primary.sql("SELECT pid FROM pg_stat_replication;").c_str());
    REQUIRE(receiver > 0);
    REQUIRE(sender > 0);
    require_carried(receiver, Role::client, via, 1, 100);
    require_carried(sender, Role::server, via, 1, 100);
    REQUIRE(table(sender)[0].bytes_out > 100000); // the WAL of 2,000 rows and more
}

} // namespace

TEST_CASE("pg postgres_fdw, dblink and PL/Proxy from one instance to another ride shm",
          "[pg][remote]") {
    fdw_dblink_plproxy(one_host());
}

TEST_CASE("pg streaming replication: pg_basebackup and the standby's walreceiver ride shm",
          "[pg][remote]") {
    streaming_replication(one_host());
}

TEST_CASE("pg psql sessions across two network namespaces ride tcp, the server sees the "
          "client's address",
          "[pg][remote][netns]") {
    Place place = two_hosts();
    PgCluster pg(place.config(1));
    Client c;
    c.netns = place.hosts->ns(0);
    c.env = {place.hosts->remote_rule(1)};
    Psql s(pg, pg.tcp_conninfo(), c);
    exercise(s);
    int port = local_port_to(s.pid(), pg.port());
    REQUIRE(port > 0);
    REQUIRE(s.query("SELECT client_addr, client_port FROM pg_stat_activity WHERE pid = "
                    "pg_backend_pid();") == place.hosts->ip(0) + "|" + std::to_string(port));
    require_carried(s.pid(), Role::client, Carrier::tcp, 1, 100);
    require_carried(s.backend_pid(), Role::server, Carrier::tcp, 1, 100);
    REQUIRE(table(s.backend_pid())[0].bytes_out > 1500000);
}

TEST_CASE("pg postgres_fdw, dblink and PL/Proxy across two network namespaces ride tcp",
          "[pg][remote][netns]") {
    fdw_dblink_plproxy(two_hosts());
}

TEST_CASE("pg streaming replication across two network namespaces rides tcp",
          "[pg][remote][netns]") {
    streaming_replication(two_hosts());
}
