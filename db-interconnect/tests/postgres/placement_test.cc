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
