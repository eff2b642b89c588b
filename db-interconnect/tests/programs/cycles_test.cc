// A thousand connections made and closed one after the other against one preloaded
// server process: every one rides vipl (the interposer's per-connection log line), and
// the server's descriptors, mappings, memfds and threads come back to what they were.
//
// The baseline is taken after ten warm-up connections: the first connection of a
// process makes what lives as long as the process (the connection table's memfd and
// its mapping, libvipl's NIC), which is not a leak.
#include "census.h"
#include "endpoint.h"
#include "files.h"
#include "mode.h"
#include "process.h"
#include "scripts.h"
#include "table.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using namespace dbt;

namespace {

void run_cycles(const Endpoint &ep, int count, const std::string &err) {
    Spawn cs;
    cs.argv = script("cycles.py");
    for (const std::string &a : ep.args()) cs.argv.push_back(a);
    cs.argv.push_back("--count");
    cs.argv.push_back(std::to_string(count));
    cs.preload = true;
    cs.env = {"VIPL_DB_LOG=2"};
    cs.out_pipe = true;
    cs.err = err;
    Proc c(cs);
    int st = c.wait(120000);
    INFO("cycles.py: " << c.output());
    REQUIRE(st == 0);
    REQUIRE(c.output().find("ok=" + std::to_string(count)) != std::string::npos);
}

// The census of pid once it holds no connection and its counts settled (bounded).
Census settled(int pid, const Census *like) {
    Census c;
    for (int i = 0; i < 200; ++i) {
        if (stat_tree(pid).empty()) {
            c = census(pid);
            if (!like || same_holdings(*like, c)) return c;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return c;
}

} // namespace

TEST_CASE("programs: 1000 connect/disconnect cycles leave the server as it was") {
    bool is_unix = GENERATE(true, false);
    TempDir dir;
    Endpoint ep = endpoint(is_unix, dir.path());
    INFO("over " << ep.name());
    Proc server = logging_echo_server(ep, dir, 2);
    Census start = census(server.pid());

    constexpr int kWarm = 10, kCycles = 1000;
    run_cycles(ep, kWarm, dir / "warm.err");
    Census base = settled(server.pid(), nullptr);
    auto t0 = std::chrono::steady_clock::now();
    run_cycles(ep, kCycles, dir / "client.err");
    auto took = std::chrono::steady_clock::now() - t0;
    Census after = settled(server.pid(), &base);

    INFO("before any connection: " << describe(start));
    INFO("after " << kWarm << " warm-up connections: " << describe(base) << "\n" << base.fd_list);
    INFO("after " << kCycles << " more: " << describe(after) << "\n" << after.fd_list);
    std::printf("cycles over %s: %d connections in %.2f s; server %s before any, %s after "
                "warm-up, %s after\n",
                ep.name().c_str(), kCycles, std::chrono::duration<double>(took).count(),
                describe(start).c_str(), describe(base).c_str(), describe(after).c_str());
    INFO("mappings that changed:\n" << mapping_changes(base, after));
    REQUIRE(same_holdings(base, after));

    // Each connection rode vipl: one line per connection on both sides.
    int expect = preloaded() ? kCycles : 0;
    INFO("server stderr (first lines): " << read_file(dir / "server.err").substr(0, 2000));
    REQUIRE(count_lines(dir / "client.err", "rides vipl (shm)") == expect);
    REQUIRE(count_lines(dir / "server.err", "rides vipl (shm)") ==
            expect + (preloaded() ? kWarm : 0));
    REQUIRE(count_lines(dir / "server.err", "stays on the kernel") == 0);
    REQUIRE(count_lines(dir / "client.err", "stays on the kernel") == 0);
    auto summary = stop_echo_server(server);
    REQUIRE(summary["connections"] == kWarm + kCycles);
}
