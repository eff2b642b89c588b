// pgbench over the interconnect: `pgbench -i` loads the tables (its COPY rides vipl),
// then read-only (-S) and TPC-B-like runs, simple and prepared, 8 clients on 2 threads;
// while each runs, pgbench's 8 connections and their 8 backends ride shm; afterwards the
// balances agree (accounts, tellers, branches and history move by the same deltas) and
// the history holds one row per TPC-B transaction pgbench counted.
#include "evidence.h"
#include "psql.h"

#include <catch2/catch.hpp>

#include <regex>
#include <sstream>

using namespace pgt;

namespace {

long number_after(const std::string &text, const std::string &label) {
    size_t at = text.find(label);
    if (at == std::string::npos) return -1;
    return std::atol(text.c_str() + at + label.size());
}

std::vector<int> pgbench_backends(PgCluster &pg) {
    std::vector<int> pids;
    std::istringstream s(pg.sql("SELECT pid FROM pg_stat_activity WHERE application_name = "
                                "'pgbench' AND backend_type = 'client backend';"));
    for (int pid; s >> pid;) pids.push_back(pid);
    return pids;
}

// One pgbench run of 3 s, its connections checked while it runs; the transactions it
// processed.
long bench(PgCluster &pg, const std::string &conninfo, bool select_only, const std::string &mode) {
    std::vector<std::string> argv = {"pgbench", "-n", "-c", "8",  "-j",    "2",
                                     "-T",      "3",  "-M", mode, conninfo};
    if (select_only) argv.insert(argv.begin() + 1, "-S");
    Launch l = pg.client(argv);
    l.out_pipe = true;
    INFO("$ " << command_text(l));
    Program p(l);
    await_carried(p.pid(), Role::client, Carrier::shm, 8, 1, 10000);
    std::vector<int> backends = pgbench_backends(pg);
    REQUIRE(backends.size() == 8);
    for (int b : backends) require_carried(b, Role::server, Carrier::shm, 1, 1);
    int st = p.wait(30000);
    INFO(p.output());
    REQUIRE(st == 0);
    REQUIRE(number_after(p.output(), "number of failed transactions: ") == 0);
    long done = number_after(p.output(), "number of transactions actually processed: ");
    REQUIRE(done > 0);
    return done;
}

} // namespace

TEST_CASE("pg pgbench -i, then -S and TPC-B, simple and prepared, -c 8 -j 2, balances agree",
          "[pg][pgbench]") {
    PgCluster pg;
    {
        Launch l = pg.client({"pgbench", "-i", "-s", "1", "-q", pg.unix_conninfo()});
        l.out_pipe = true;
        Program init(l);
        std::vector<Seen> seen = watch(init, 60000);
        INFO(describe(seen) << init.output());
        REQUIRE(init.wait(1000) == 0);
        // The COPY of 100,000 accounts went through the stream.
        bool rode = false;
        for (const Seen &s : seen)
            rode |= s.row.carrier == Carrier::shm && s.row.bytes_out > 1000000;
        REQUIRE(rode);
    }
    REQUIRE(pg.sql("SELECT count(*) FROM pgbench_accounts;") == "100000");

    const std::string sums = "SELECT (SELECT sum(abalance) FROM pgbench_accounts), "
                             "(SELECT sum(tbalance) FROM pgbench_tellers), "
                             "(SELECT sum(bbalance) FROM pgbench_branches), "
                             "(SELECT coalesce(sum(delta), 0) FROM pgbench_history), "
                             "(SELECT count(*) FROM pgbench_history);";
    REQUIRE(pg.sql(sums) == "0|0|0|0|0");

    long tpcb = 0;
    for (const char *mode : {"simple", "prepared"}) {
        INFO("-M " << mode);
        // Read-only over one family, TPC-B over the other, crossed between the modes.
        bool prepared = std::string(mode) == "prepared";
        bench(pg, prepared ? pg.tcp_conninfo() : pg.unix_conninfo(), true, mode);
        REQUIRE(pg.sql("SELECT count(*) FROM pgbench_history;") == std::to_string(tpcb));
        tpcb += bench(pg, prepared ? pg.unix_conninfo() : pg.tcp_conninfo(), false, mode);

        std::string got = pg.sql(sums);
        INFO("sums: " << got);
        std::smatch m;
        REQUIRE(std::regex_match(got, m,
                                 std::regex("(-?\\d+)\\|(-?\\d+)\\|(-?\\d+)\\|(-?\\d+)\\|(\\d+)")));
        REQUIRE(m[1] == m[2]);
        REQUIRE(m[2] == m[3]);
        REQUIRE(m[3] == m[4]);
        REQUIRE(std::stol(m[5]) == tpcb);
    }
}
