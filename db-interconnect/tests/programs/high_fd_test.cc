// A connection at the highest descriptor number the limit allows (hard limit - 1), on
// both ends, under the interposer; then the same above 65,535 when the kernel lets the
// test raise the hard limit that far (raising it needs CAP_SYS_RESOURCE).
#include "endpoint.h"
#include "files.h"
#include "mode.h"
#include "process.h"
#include "table.h"

#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

using namespace dbt;

namespace {

// Runs programs/highfd.py as server and client with RLIMIT_NOFILE = nofile (0: ours).
void at_limit(bool is_unix, long nofile) {
    TempDir dir;
    Endpoint ep = endpoint(is_unix, dir.path());
    rlimit rl{};
    REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    long hard = nofile > 0 ? nofile : static_cast<long>(rl.rlim_max);
    std::string want = "fd=" + std::to_string(hard - 1) + " ";
    INFO("over " << ep.name() << ", hard limit " << hard);

    auto spawn = [&](const char *role) {
        Spawn s;
        s.argv = script("highfd.py");
        for (const std::string &a : ep.args()) s.argv.push_back(a);
        s.argv.push_back("--role");
        s.argv.push_back(role);
        s.preload = true;
        s.env = {"VIPL_DB_LOG=1"};
        s.in_pipe = true;
        s.out_pipe = true;
        s.err = dir / (std::string(role) + ".err");
        s.nofile = nofile;
        return s;
    };
    Proc server(spawn("server"));
    server.require_output("listening", 10000);
    wait_listening(ep, preloaded());
    // The server's first, ordinary connection (see highfd.py).
    int first = connect_to(ep);
    REQUIRE(first >= 0);
    REQUIRE(send_all(first, "first"));
    shutdown(first, SHUT_WR);
    int end = 0;
    REQUIRE(read_for(first, 6, 5000, &end) == "first");
    REQUIRE(end == 1);
    close(first);
    Proc client(spawn("client"));
    client.require_output("sha256=", 20000);
    server.require_output("sha256=", 20000);
    REQUIRE(server.output().find(want) != std::string::npos);
    REQUIRE(client.output().find(want) != std::string::npos);
    auto sum = [](const std::string &o) { return o.substr(o.find("sha256="), 71); };
    REQUIRE(sum(server.output()) == sum(client.output()));

    std::vector<StatRow> srv = tree_when_riding(server.pid(), "server", 1);
    std::vector<StatRow> cli = tree_when_riding(client.pid(), "client", 1);
    require_riding(srv, "server", 1, 1 << 20, 1 << 20);
    require_riding(cli, "client", 1, 1 << 20, 1 << 20);
    if (preloaded()) {
        REQUIRE(srv[0].fd == hard - 1);
        REQUIRE(cli[0].fd == hard - 1);
    }
    REQUIRE(client.write_in("\n"));
    REQUIRE(client.wait(10000) == 0);
    REQUIRE(server.wait(10000) == 0);
    REQUIRE(server.output().find("closed") != std::string::npos);
    require_no_interposer_lines(dir);
}

} // namespace

TEST_CASE("programs: a connection at descriptor hard limit - 1 rides vipl") {
    bool is_unix = GENERATE(true, false);
    at_limit(is_unix, 0);
}

// Registered with ctest on its own (tests/CMakeLists.txt): where the kernel refuses the
// limit, the program leaves with kSkipped, which ctest reports as a skipped test.
TEST_CASE("programs: a connection above descriptor 65,535 rides vipl", "[.above-65535]") {
    constexpr long kHigh = 70000;
    constexpr int kSkipped = 77;
    int st;
    {
        Spawn probe;
        probe.argv = {"true"};
        probe.nofile = kHigh;
        Proc p(probe);
        st = p.wait(5000);
    }
    if (st == kExitLimit) {
        // setrlimit failed in the child (EPERM: no CAP_SYS_RESOURCE).
        std::printf("not run: the kernel refuses RLIMIT_NOFILE %ld to this process\n", kHigh);
        std::fflush(stdout);
        std::exit(kSkipped);
    }
    REQUIRE(st == 0);
    at_limit(false, kHigh);
}
