// vipl-pg status -D DATADIR against real PostgreSQL 15 servers (run as `postgres`): one
// started with vipl-run and a psql session on it (shm on this host; tcp between two
// network namespaces), a plain one, a stopped one.
#include "server.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

using namespace pgt;

namespace {

Result status(const Server &s) {
    Command c;
    c.argv = {vipl_pg(), "status", "-D", s.data_dir()};
    return run(c);
}

// The row vipl-pg status prints for process pid's connection as role (server/client).
std::vector<std::string> row_of(const std::string &out, int pid, const char *role) {
    for (const std::string &l : lines(out)) {
        std::vector<std::string> w = words(l);
        if (w.size() == 13 && w[0] == std::to_string(pid) && w[2] == role) return w;
    }
    return {};
}

// A session on a vipl-run server rides `transport`: status says the postmaster has the
// interposer, counts the connection, and shows the session's backend row.
void check_rides(const Server &s, Psql &psql, const char *transport) {
    psql.query("SELECT count(*) FROM pg_class"); // bytes both ways
    Result r = status(s);
    INFO(r.out << "\nserver log:\n" << s.log());
    CHECK(r.status == 0);
    CHECK(r.out.find("has the interposer (" + library()) != std::string::npos);
    bool shm = std::string(transport) == "shm";
    CHECK(r.out.find(std::string("connections: 1 ride vipl (shm ") +
                     (shm ? "1, tcp 0" : "0, tcp 1") + "), 0 on the kernel") != std::string::npos);
    // The scheduler setting that decides how clients on the server's CPU fare.
    std::string ag = autogroups_setting();
    CHECK(r.out.find(ag == "1"   ? "scheduler: autogroups on: "
                     : ag == "0" ? "scheduler: autogroups off\n"
                                 : "scheduler: autogroups unknown") != std::string::npos);
    std::vector<std::string> row = row_of(r.out, psql.backend_pid(), "server");
    REQUIRE(row.size() == 13);
    CHECK(row[3] == transport);
    CHECK(std::stoull(row[5]) > 0); // BYTES_IN
    CHECK(std::stoull(row[6]) > 0); // BYTES_OUT

    // vipl-run --stat prints the same columns for the backend; its message count is
    // published once the backend waits for the next query (bounded retry).
    std::vector<std::string> stat;
    for (int i = 0; i < 50; ++i) {
        Command c;
        c.argv = {vipl_run(), "--stat", std::to_string(psql.backend_pid())};
        Result st = run(c);
        REQUIRE(st.status == 0);
        REQUIRE(lines(st.out).size() >= 1);
        CHECK(words(lines(st.out)[0]).size() == 13); // the heading
        stat = row_of(st.out, psql.backend_pid(), "server");
        REQUIRE(stat.size() == 13);
        if (std::stoull(stat[9]) > 0) break; // MSGS_IN
        usleep(100000);
    }
    CHECK(stat[3] == transport);
    CHECK(std::stoull(stat[9]) > 0);
    CHECK(std::stoull(stat[10]) > 0); // MSGS_OUT
}

} // namespace

TEST_CASE("vipl-pg status -D: a server started with vipl-run has it, a psql session rides shm") {
    Server s;
    Psql psql(s, {});
    check_rides(s, psql, "shm");
}

TEST_CASE("vipl-pg status -D: across network namespaces a psql session rides tcp") {
    NetnsSession ns;
    check_rides(ns.server, ns.psql, "tcp");
}

TEST_CASE("vipl-pg status -D: a server whose library was replaced on disk still has it") {
    // An upgrade (make install, a package) replaces libvipl-db.so under a running server:
    // its processes keep the old file mapped, marked "(deleted)" in /proc/<pid>/maps.
    TempDir lib_dir("postgres");
    std::string copy = lib_dir.path() + "/libvipl-db.so";
    {
        std::ifstream in(library(), std::ios::binary);
        std::ofstream out(copy, std::ios::binary);
        out << in.rdbuf();
        REQUIRE(out.good());
    }
    REQUIRE(chmod(copy.c_str(), 0755) == 0);
    ServerOptions o;
    o.env = {"VIPL_RUN_LIBRARY=" + copy};
    Server s(o);
    Psql psql(s, {});
    psql.query("SELECT 1");
    Result before = status(s);
    INFO(before.out);
    CHECK(before.status == 0);
    CHECK(before.out.find("has the interposer (" + copy + ", from LD_PRELOAD)") !=
          std::string::npos);
    REQUIRE(unlink(copy.c_str()) == 0);
    Result r = status(s);
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(r.out.find("has the interposer (" + copy +
                     ", from LD_PRELOAD, replaced on disk since it started") != std::string::npos);
    CHECK(r.out.find("connections: 1 ride vipl (shm 1, tcp 0)") != std::string::npos);
    CHECK(psql.query("SELECT 2") == std::vector<std::string>{"2"}); // the session goes on
}

TEST_CASE("vipl-pg status -D: a plain server runs without the interposer (exit 1)") {
    Server s(plain_server());
    Psql psql(s, {}); // an interposed client of a plain server stays on the kernel
    Result r = status(s);
    INFO(r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find("runs without the interposer") != std::string::npos);
    CHECK(r.out.find("ride vipl") == std::string::npos);
}

TEST_CASE("vipl-pg status -D: a stopped server is not running (exit 1)") {
    Server s;
    s.stop();
    Result r = status(s);
    INFO(r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find("not running") != std::string::npos);
}
