// Faults around connections that ride vipl: a client killed with SIGKILL mid-query (its
// backend hears within 100 ms and logs PostgreSQL's usual error; the postmaster holds
// nothing more than before), a backend killed with SIGKILL mid-query (psql hears within
// 100 ms; the postmaster's crash-restart cycle; an interactive psql resets its
// connection, which rides vipl again), `pg_ctl restart` with interactive clients that
// reconnect.
#include "evidence.h"
#include "psql.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <time.h>

#include <cstdio>

using namespace pgt;

namespace {

constexpr uint64_t kHearNs = 100'000'000; // "within 100 ms"

int64_t wall_ms() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Waits up to ms for `text` to appear in the server's log at least `times` times.
bool await_log(const PgCluster &pg, const std::string &text, int times, int ms) {
    uint64_t deadline = now_ns() + static_cast<uint64_t>(ms) * 1000000ull;
    for (;;) {
        std::string log = pg.log();
        int n = 0;
        for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++n;
        if (n >= times) return true;
        if (now_ns() > deadline) return false;
        sleep_ms(10);
    }
}

// When (wall clock, ms) process pid logged `text`, from the log line's timestamp
// (log_line_prefix '%m [%p] '); -1 when it did not within 5 s.
int64_t logged_at(const PgCluster &pg, int pid, const std::string &text) {
    const std::string tag = "[" + std::to_string(pid) + "] ";
    uint64_t deadline = now_ns() + 5'000'000'000ull;
    for (;;) {
        std::string log = pg.log();
        for (size_t at = log.find(tag); at != std::string::npos; at = log.find(tag, at + 1)) {
            size_t bol = log.rfind('\n', at);
            bol = bol == std::string::npos ? 0 : bol + 1;
            size_t eol = log.find('\n', at);
            if (log.substr(at, eol - at).find(text) == std::string::npos) continue;
            tm t{};
            int ms = 0;
            if (std::sscanf(log.c_str() + bol, "%d-%d-%d %d:%d:%d.%d", &t.tm_year, &t.tm_mon,
                            &t.tm_mday, &t.tm_hour, &t.tm_min, &t.tm_sec, &ms) != 7)
                continue;
            t.tm_year -= 1900;
            t.tm_mon -= 1;
            return static_cast<int64_t>(timegm(&t)) * 1000 + ms;
        }
        if (now_ns() > deadline) return -1;
        sleep_ms(10);
    }
}

// Kills psql with SIGKILL; its backend must log `error` within 100 ms and be gone
// within a second.
void kill_client(PgCluster &pg, Psql &c, const std::string &error) {
    int backend = c.backend_pid();
    int64_t t0 = wall_ms();
    kill(c.pid(), SIGKILL);
    int64_t t1 = logged_at(pg, backend, error);
    INFO("backend " << backend << " did not log \"" << error << "\"; the log:\n" << pg.log());
    REQUIRE(t1 >= 0);
    INFO("the backend logged \"" << error << "\" " << t1 - t0 << " ms after the kill");
    CHECK(t1 - t0 <= 100);
    REQUIRE(wait_gone(backend, 1000));
}

void still_riding(Psql &s) {
    REQUIRE(s.query("SELECT 6 * 7;") == "42");
    require_carried(s.pid(), Role::client, Carrier::shm);
    require_carried(s.backend_pid(), Role::server, Carrier::shm);
}

} // namespace

TEST_CASE("pg faults: a client killed with kill -9 mid-query: its backend logs the usual error "
          "within 100 ms, nothing leaks",
          "[pg][faults]") {
    ClusterConfig c;
    c.conf = {"client_connection_check_interval = '10ms'"};
    PgCluster pg(c);
    Psql bystander(pg, pg.unix_conninfo());
    const int pm = pg.postmaster_pid();
    const Footprint before = footprint(pm);

    SECTION("while its backend streams a result to it") {
        Psql victim(pg, pg.tcp_conninfo());
        require_carried(victim.backend_pid(), Role::server, Carrier::shm);
        victim.send("\\copy (SELECT generate_series(1, 100000000), repeat('x', 1000)) TO "
                    "'/dev/null'");
        uint64_t deadline = now_ns() + 10'000'000'000ull;
        while (table(victim.backend_pid())[0].bytes_out < (20u << 20) && now_ns() < deadline)
            sleep_ms(5);
        REQUIRE(table(victim.backend_pid())[0].bytes_out >= (20u << 20));
        kill_client(pg, victim, "could not send data to client");
    }
    SECTION("while its backend sleeps (client_connection_check_interval)") {
        Psql victim(pg, pg.unix_conninfo());
        require_carried(victim.backend_pid(), Role::server, Carrier::shm);
        victim.send("SELECT pg_sleep(60);");
        await_sleeping(pg, victim.backend_pid());
        kill_client(pg, victim, "connection to client lost");
    }
    SECTION("while its backend waits for the next statement in a transaction") {
        Psql victim(pg, pg.tcp_conninfo());
        REQUIRE(victim.query("BEGIN; SELECT 1;") == "1");
        require_carried(victim.backend_pid(), Role::server, Carrier::shm);
        kill_client(pg, victim, "unexpected EOF on client connection with an open transaction");
    }
    require_footprint(pm, before);
    still_riding(bystander);
    CHECK(pg.log().find("terminated by signal") == std::string::npos);
}

TEST_CASE("pg faults: a backend killed with kill -9 mid-query: psql hears within 100 ms, the "
          "crash-restart cycle, clients reset and ride again",
          "[pg][faults]") {
    PgCluster pg;
    const int pm = pg.postmaster_pid();
    Psql other(pg, pg.unix_conninfo(), Client{}, true); // interactive: it resets
    Psql victim(pg, pg.tcp_conninfo());
    const Footprint before = footprint(pm);
    int backend = victim.backend_pid();
    require_carried(victim.pid(), Role::client, Carrier::shm);
    require_carried(backend, Role::server, Carrier::shm);
    victim.send("SELECT pg_sleep(60);");
    await_sleeping(pg, backend);
    uint64_t t0 = now_ns();
    kill(backend, SIGKILL);
    uint64_t heard = victim.expect("server closed the connection unexpectedly", 5000);
    INFO("psql printed: " << victim.since_send());
    REQUIRE(heard != 0);
    INFO("psql heard " << (heard - t0) / 1000 << " us after the kill");
    CHECK(heard - t0 <= kHearNs);
    REQUIRE(victim.program().wait(5000) == 2);

    // The postmaster ends every backend, reinitialises, and serves again.
    REQUIRE(await_log(pg, "was terminated by signal 9", 1, 5000));
    REQUIRE(await_log(pg, "all server processes terminated; reinitializing", 1, 10000));
    REQUIRE(await_log(pg, "database system is ready to accept connections", 2, 20000));
    REQUIRE(pg.postmaster_pid() == pm);

    // The interactive psql finds its connection gone, resets it, and rides again.
    std::string out = other.query("SELECT 1;");
    INFO(out);
    REQUIRE(out.find("Attempting reset: Succeeded.") != std::string::npos);
    REQUIRE(other.refresh_backend_pid() > 0);
    still_riding(other);
    Psql fresh(pg, pg.tcp_conninfo());
    still_riding(fresh);
    // The postmaster's listeners and markers went through the cycle unchanged.
    Footprint after = footprint(pm);
    INFO("before " << describe(before) << "; after " << describe(after));
    CHECK(after.fds == before.fds);
    CHECK(after.memfds == before.memfds);
}

TEST_CASE("pg faults: pg_ctl restart, interactive clients reconnect and ride again",
          "[pg][faults]") {
    PgCluster pg;
    Psql a(pg, pg.tcp_conninfo(), Client{}, true);
    Psql b(pg, pg.unix_conninfo(), Client{}, true);
    still_riding(a);
    still_riding(b);
    const int old_a = a.backend_pid(), old_b = b.backend_pid();
    pg.restart();
    for (Psql *s : {&a, &b}) {
        std::string out = s->query("SELECT 1;");
        INFO(out);
        REQUIRE(out.find("Attempting reset: Succeeded.") != std::string::npos);
        s->refresh_backend_pid();
        still_riding(*s);
    }
    CHECK(a.backend_pid() != old_a);
    CHECK(b.backend_pid() != old_b);
    Psql fresh(pg, pg.tcp_conninfo());
    still_riding(fresh);
}
