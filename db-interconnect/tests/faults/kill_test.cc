// A peer killed with SIGKILL in the middle of a transfer over vipl: the survivor learns
// it within 100 ms (EOF or ECONNRESET for a reader, EPIPE or ECONNRESET for a writer),
// and once the victim is reaped nothing of the connection is left: the survivor's
// descriptors, mappings, memfds and threads are what they were before the connection,
// nothing new is in /dev/shm, and no process of the victim's survives.
//
// Both ends run programs/peer.py.  The survivor makes one ordinary connection first, so
// that its baseline includes what the first connection of a process makes for good.
#include "census.h"
#include "endpoint.h"
#include "files.h"
#include "mode.h"
#include "process.h"
#include "table.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <time.h>

#include <chrono>
#include <sstream>
#include <thread>

using namespace dbt;

namespace {

int64_t monotonic_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

Spawn peer(const Endpoint &ep, std::vector<std::string> args, const std::string &err) {
    Spawn s;
    s.argv = script("peer.py");
    for (const std::string &a : ep.args()) s.argv.push_back(a);
    s.argv.insert(s.argv.end(), args.begin(), args.end());
    s.preload = true;
    s.env = {"VIPL_DB_LOG=1"};
    s.in_pipe = true;
    s.out_pipe = true;
    s.err = err;
    return s;
}

// "end K HOW NS" of connection k in a peer's output.
void ended(const std::string &out, int k, std::string *how, int64_t *ns) {
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream f(line);
        std::string word, h;
        int kk = 0;
        int64_t t = 0;
        if (f >> word >> kk >> h >> t && word == "end" && kk == k) {
            *how = h;
            *ns = t;
            return;
        }
    }
    FAIL("no end of connection " << k << " in: " << out);
}

Census settled(int pid, const Census &like) {
    Census c;
    for (int i = 0; i < 100; ++i) {
        c = census(pid);
        if (same_holdings(like, c)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return c;
}

} // namespace

TEST_CASE("faults: a peer killed mid-transfer: the survivor knows within 100 ms, nothing left") {
    // The victim is the client that sends, or the server that receives (the survivor is
    // then a writer blocked on a full connection).
    bool victim_sends = GENERATE(true, false);
    bool is_unix = GENERATE(true, false);
    TempDir dir;
    Endpoint ep = endpoint(is_unix, dir.path());
    INFO((victim_sends ? "the sending client" : "the receiving server")
         << " dies, over " << ep.name());
    std::vector<std::string> shm_before = dev_shm("vipl");

    // The first connection rides vipl before it ends, so that the baseline holds what a
    // process keeps once it has had one (libvipl's arena, the connection table).
    Proc survivor, victim;
    if (victim_sends) {
        survivor = Proc(peer(ep, {"--listen", "--recv", "--connections", "2"}, dir / "s.err"));
        survivor.require_output("listening", 10000);
        wait_listening(ep, preloaded());
        Proc warm(peer(ep, {"--connect", "--send", "--first", "200000", "--hold"}, dir / "w.err"));
        warm.require_output("held 1", 10000);
        require_riding(tree_when_riding(survivor.pid(), "server", 1), "server", 1);
        REQUIRE(warm.write_in("\n"));
        warm.close_in();
        REQUIRE(warm.wait(10000) == 0);
        survivor.require_output("closed 1", 10000);
    } else {
        victim = Proc(peer(ep, {"--listen", "--recv", "--connections", "2"}, dir / "v.err"));
        victim.require_output("listening", 10000);
        wait_listening(ep, preloaded());
        survivor = Proc(peer(
            ep,
            {"--connect", "--send", "--connections", "2", "--first", "200000", "--hold", "--step"},
            dir / "s.err"));
        survivor.require_output("held 1", 10000);
        require_riding(tree_when_riding(survivor.pid(), "client", 1), "client", 1);
        REQUIRE(survivor.write_in("\n"));
        survivor.require_output("closed 1", 10000);
    }
    Census base = census(survivor.pid());

    if (victim_sends) {
        victim = Proc(peer(ep, {"--connect", "--send"}, dir / "v.err"));
    } else {
        REQUIRE(survivor.write_in("\n"));
    }
    survivor.require_output("flowing 2", 10000);
    const char *srole = victim_sends ? "server" : "client";
    const char *vrole = victim_sends ? "client" : "server";
    require_riding(tree_when_riding(survivor.pid(), srole, 1), srole, 1);
    require_riding(tree_when_riding(victim.pid(), vrole, 1), vrole, 1);

    int victim_pid = victim.pid();
    int64_t t0 = monotonic_ns();
    victim.signal(SIGKILL);
    REQUIRE(victim.wait(5000) == 128 + SIGKILL);
    survivor.require_output("closed 2", 15000);
    std::string how;
    int64_t t1 = 0;
    ended(survivor.output(), 2, &how, &t1);
    double ms = static_cast<double>(t1 - t0) / 1e6;
    size_t at = survivor.output().find("closed 2 ");
    double close_ms =
        static_cast<double>(std::atoll(survivor.output().c_str() + at + 9) - t1) / 1e6;
    std::printf("kill -9 (%s dies, %s): the survivor saw %s after %.2f ms, closed %.2f ms later\n",
                vrole, ep.name().c_str(), how.c_str(), ms, close_ms);
    if (victim_sends)
        REQUIRE((how == "eof" || how == "ECONNRESET"));
    else
        REQUIRE((how == "EPIPE" || how == "ECONNRESET"));
    REQUIRE(ms < 100.0);

    // Nothing of the connection is left: not in the survivor, not in /dev/shm, no process.
    Census after = settled(survivor.pid(), base);
    INFO("survivor before: " << describe(base) << "\n" << base.fd_list);
    INFO("survivor after: " << describe(after) << "\n" << after.fd_list);
    INFO("mappings that changed:\n" << mapping_changes(base, after));
    REQUIRE(same_holdings(base, after));
    REQUIRE(stat_tree(survivor.pid()).empty());
    REQUIRE(!alive(victim_pid));
    REQUIRE(descendants(victim_pid).empty());
    REQUIRE(dev_shm("vipl") == shm_before);
    survivor.close_in();
    REQUIRE(survivor.wait(10000) == 0);
}
