// vipl-pg on a real Debian cluster, made for the test and always dropped: pg_createcluster
// 15 vipltest_<pid> on a free port (the machine's own clusters are never touched), enable,
// pg_ctlcluster start, a psql session, status, stop, disable, pg_dropcluster.
#include "server.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>

using namespace pgt;

namespace {

const char *kPrefix = "vipltest_";

Result root(std::vector<std::string> argv, int timeout_ms = 120000) {
    Command c;
    c.argv = std::move(argv);
    return run(c, timeout_ms);
}

// Drops test clusters whose creating test process is gone (a run killed half way).
void drop_stale() {
    DIR *d = opendir("/etc/postgresql/15");
    if (!d) return;
    std::vector<std::string> stale;
    while (dirent *e = readdir(d)) {
        std::string n = e->d_name;
        if (n.rfind(kPrefix, 0) != 0) continue;
        int pid = std::atoi(n.c_str() + std::string(kPrefix).size());
        if (pid > 0 && kill(pid, 0) != 0) stale.push_back(n);
    }
    closedir(d);
    for (const std::string &n : stale) root({"/usr/bin/pg_dropcluster", "--stop", "15", n});
}

// The cluster, dropped (stopped first) whatever happens to the test.
struct TestCluster {
    std::string name = kPrefix + std::to_string(getpid());
    int port = free_port();
    bool made = false;
    ~TestCluster() { drop(); }
    void drop() {
        if (made) root({"/usr/bin/pg_dropcluster", "--stop", "15", name});
        made = false;
    }
    std::string conf_dir() const { return "/etc/postgresql/15/" + name; }
    std::string log() const {
        return read_text("/var/log/postgresql/postgresql-15-" + name + ".log");
    }
};

Result tool(const std::string &command, const std::string &cluster) {
    return root({vipl_pg(), command, "15", cluster});
}

} // namespace

TEST_CASE("vipl-pg on a Debian cluster: enable, pg_ctlcluster start, status, stop, disable") {
    REQUIRE(access("/usr/bin/pg_createcluster", X_OK) == 0);
    drop_stale();
    TestCluster tc;
    Result r = root({"/usr/bin/pg_createcluster", "-p", std::to_string(tc.port), "--start-conf",
                     "manual", "-o", "fsync=off", "15", tc.name});
    tc.made = true;
    INFO(r.out);
    REQUIRE(r.status == 0);

    // Settings of the interconnect live in the same file (see harness.h for why these).
    std::string env = tc.conf_dir() + "/environment";
    std::string original = read_text(env);
    for (const std::string &kv : vipl_env()) {
        size_t eq = kv.find('=');
        original += kv.substr(0, eq) + " = '" + kv.substr(eq + 1) + "'\n";
    }
    write_text(env, original);

    r = tool("enable", tc.name);
    INFO(r.out);
    REQUIRE(r.status == 0);
    CHECK(r.out.find("pg_ctlcluster 15 " + tc.name + " restart") != std::string::npos);
    r = tool("status", tc.name);
    INFO(r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find("not running") != std::string::npos);

    r = root({"/usr/bin/pg_ctlcluster", "15", tc.name, "start"});
    INFO(r.out << tc.log());
    REQUIRE(r.status == 0);
    {
        Psql psql(tc.port, {true, "/var/run/postgresql", "", {}, ""});
        psql.query("SELECT count(*) FROM pg_class");
        r = tool("status", tc.name);
        INFO(r.out << tc.log());
        CHECK(r.status == 0);
        CHECK(r.out.find("enables it (LD_PRELOAD names") != std::string::npos);
        CHECK(r.out.find("has the interposer (") != std::string::npos);
        CHECK(r.out.find(" ride vipl (shm 1") != std::string::npos);
        bool row = false;
        for (const std::string &l : lines(r.out)) {
            std::vector<std::string> w = words(l);
            if (w.size() == 13 && w[0] == std::to_string(psql.backend_pid()))
                row = w[2] == "server" && w[3] == "shm";
        }
        CHECK(row);
    }
    r = root({"/usr/bin/pg_ctlcluster", "15", tc.name, "stop"});
    INFO(r.out);
    CHECK(r.status == 0);

    r = tool("disable", tc.name);
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(read_text(env) == original);

    // Started again, the cluster runs without it.
    r = root({"/usr/bin/pg_ctlcluster", "15", tc.name, "start"});
    INFO(r.out << tc.log());
    REQUIRE(r.status == 0);
    r = tool("status", tc.name);
    INFO(r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find("does not enable it") != std::string::npos);
    CHECK(r.out.find("runs without the interposer") != std::string::npos);

    tc.drop();
    CHECK(access(tc.conf_dir().c_str(), F_OK) != 0);
}
