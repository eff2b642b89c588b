// The placement rule (db-interconnect/src/placement.h): a client and a server that may run
// only on one and the same CPU, in two scheduling groups (the postmaster's session and
// the client's, with autogroups on), keep their connection on the kernel socket, where
// it is faster; in one group (autogroups off, one cgroup), on two CPUs, or with
// VIPL_DB_ONE_CPU=1 at either end, it rides vipl.  Pinning is inherited: the test pins
// itself before it starts the postmaster (its backends fork from it) and each psql, and
// puts its own CPUs and the autogroup setting back at the end.
#include "evidence.h"
#include "psql.h"
#include "workload.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sched.h>
#include <sstream>

using namespace pgt;

namespace {

// The test's own CPUs while it lives; pin() narrows them to one.
class Pinning {
public:
    Pinning() {
        CPU_ZERO(&saved_);
        REQUIRE(sched_getaffinity(0, sizeof saved_, &saved_) == 0);
    }
    ~Pinning() { sched_setaffinity(0, sizeof saved_, &saved_); }
    std::vector<int> cpus() const {
        std::vector<int> out;
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &saved_)) out.push_back(c);
        return out;
    }
    void pin(int cpu) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    }
    void unpin() { REQUIRE(sched_setaffinity(0, sizeof saved_, &saved_) == 0); }

private:
    cpu_set_t saved_;
};

// kernel.sched_autogroup_enabled while it lives: set() changes it when the test may
// (root, a writable /proc/sys), and says what it is.
class Autogroups {
public:
    Autogroups() : saved_(read()) {}
    ~Autogroups() {
        if (saved_ >= 0) write(saved_);
    }
    int set(int v) {
        write(v);
        return read();
    }

private:
    static constexpr const char *kPath = "/proc/sys/kernel/sched_autogroup_enabled";
    static int read() {
        std::ifstream in(kPath);
        int v = -1;
        in >> v;
        return v;
    }
    static void write(int v) {
        std::ofstream out(kPath);
        out << v << "\n";
    }
    int saved_;
};

} // namespace

TEST_CASE("pg placement: one shared CPU keeps the connection on the kernel, two ride vipl",
          "[pg][placement]") {
    Pinning pins;
    Autogroups autogroups;
    const std::vector<int> cpus = pins.cpus();
    REQUIRE(!cpus.empty());
    pins.pin(cpus[0]);
    PgCluster pg;
    for (bool tcp : {false, true}) {
        INFO((tcp ? "TCP 127.0.0.1" : "unix socket"));
        const std::string conninfo = tcp ? pg.tcp_conninfo() : pg.unix_conninfo();
        bool seen[2] = {false, false};
        for (int want : {1, 0}) {
            // Both on cpus[0], interposed at both ends: with autogroups on, psql and the
            // postmaster (pg_ctl's own session) are in two groups, and the connection
            // stays on the kernel; off, both are in the test's cgroup, and it rides vipl.
            const int on = autogroups.set(want);
            REQUIRE((on == 0 || on == 1));
            if (seen[on]) continue;
            seen[on] = true;
            INFO("kernel.sched_autogroup_enabled=" << on);
            Psql s(pg, conninfo);
            exercise(s);
            const Carrier c = on ? Carrier::kernel : Carrier::shm;
            require_carried(s.pid(), Role::client, c, 1, on ? 0 : 1);
            require_carried(s.backend_pid(), Role::server, c, 1, on ? 0 : 1);
        }
        if (!seen[0] || !seen[1])
            WARN("kernel.sched_autogroup_enabled cannot be changed here: one of its two "
                 "values was not tried");
        autogroups.set(1);
        {
            // The client's VIPL_DB_ONE_CPU=1 decides for vipl.
            Client held;
            held.env = {"VIPL_DB_ONE_CPU=1"};
            Psql s(pg, conninfo, held);
            exercise(s);
            require_carried(s.pid(), Role::client, Carrier::shm);
            require_carried(s.backend_pid(), Role::server, Carrier::shm);
        }
        if (cpus.size() < 2) {
            WARN("one CPU only: the two-CPU half of this test cannot run here");
            continue;
        }
        for (bool both : {false, true}) {
            // The client on another CPU, or on all of the test's: vipl.
            INFO((both ? "client on every CPU" : "client on another CPU"));
            if (both)
                pins.unpin();
            else
                pins.pin(cpus[1]);
            Psql s(pg, conninfo);
            pins.pin(cpus[0]);
            exercise(s);
            require_carried(s.pid(), Role::client, Carrier::shm);
            require_carried(s.backend_pid(), Role::server, Carrier::shm);
        }
    }
}

TEST_CASE("pg placement: the server's VIPL_DB_ONE_CPU=1 decides for vipl too", "[pg][placement]") {
    Pinning pins;
    Autogroups autogroups;
    pins.pin(pins.cpus()[0]);
    // Autogroups on: without the setting, this connection would stay on the kernel.
    if (autogroups.set(1) != 1)
        WARN("kernel.sched_autogroup_enabled cannot be set here: the connection would ride "
             "vipl without the server's setting too");
    ClusterConfig c;
    c.env = {"VIPL_DB_ONE_CPU=1"};
    PgCluster pg(c);
    Psql s(pg, pg.unix_conninfo());
    exercise(s);
    require_carried(s.pid(), Role::client, Carrier::shm);
    require_carried(s.backend_pid(), Role::server, Carrier::shm);
}

// The client's one-CPU memo (src/one_cpu_memo.h): psql reconnects with \c.  Its first
// connection asks the server and stays on the kernel; the second, made at once from the
// same CPU, sends no HELLO and stays there too; the third, more than the memo's second
// later, asks again.  Every statement is answered on each of the three.
TEST_CASE("pg placement: a client remembers the one-CPU answer for a second, then asks again",
          "[pg][placement]") {
    Pinning pins;
    Autogroups autogroups;
    pins.pin(pins.cpus()[0]);
    if (autogroups.set(1) != 1) {
        WARN("kernel.sched_autogroup_enabled cannot be set here: no one-CPU answer to remember");
        return;
    }
    PgCluster pg;
    const std::string asked = "client and server run on one CPU only";
    const std::string recalled = "client and server run on one CPU only (the server said so ";
    for (bool tcp : {false, true}) {
        INFO((tcp ? "TCP 127.0.0.1" : "unix socket"));
        Client c;
        c.env = {"VIPL_DB_LOG=2"};
        const std::string out =
            run_ok(pg.client({"psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d",
                              tcp ? pg.tcp_conninfo() : pg.unix_conninfo(), "-c", "SELECT 'one'",
                              "-c", "\\c", "-c", "SELECT 'two'", "-c", "\\! sleep 1.3", "-c", "\\c",
                              "-c", "SELECT 'three'"},
                             c),
                   30000);
        INFO(out);
        REQUIRE(out.find("one\n") != std::string::npos);
        REQUIRE(out.find("two\n") != std::string::npos);
        REQUIRE(out.find("three\n") != std::string::npos);
        // The interposer's lines, in the order it wrote them (psql's own output may come
        // later through its buffer): asked, recalled, asked again.
        std::vector<std::string> said;
        std::istringstream lines(out);
        for (std::string l; std::getline(lines, l);)
            if (l.find("stays on the kernel: ") != std::string::npos) said.push_back(l);
        REQUIRE(said.size() == 3);
        CHECK(said[0].ends_with(asked));
        CHECK(said[1].find(recalled) != std::string::npos);
        CHECK(said[2].ends_with(asked));
    }
}
