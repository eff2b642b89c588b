// Each direction of the fallback: a preloaded client of a plain server, a plain client of
// a preloaded server, and both preloaded.  The server (socat) records exactly what it
// received (to a file) and never writes; the client (netcat-openbsd) records exactly what
// it received (nothing).  A plain side must see the program's bytes and nothing else: no
// HELLO reaches a plain server, no REPLY a plain client.
//
// The server forks a child per connection and keeps listening: a client learns that its
// server runs the interconnect from the listener's marker after its connect, so a server
// that closed its listener at once (socat without fork) would leave it to chance.
#include "endpoint.h"
#include "files.h"
#include "mode.h"
#include "process.h"
#include "table.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using namespace dbt;

namespace {

struct Case {
    const char *name;
    bool client_preloaded, server_preloaded;
};

} // namespace

TEST_CASE("programs: fallback directions keep every plain side's bytes exact") {
    Case c = GENERATE(Case{"preloaded client, plain server", true, false},
                      Case{"plain client, preloaded server", false, true},
                      Case{"both preloaded", true, true});
    bool is_unix = GENERATE(true, false);
    TempDir dir;
    Endpoint ep = endpoint(is_unix, dir.path());
    INFO(c.name << ", over " << ep.name());

    Spawn ss;
    ss.argv = {"socat", "-u", ep.socat_listen() + ",fork", "CREATE:" + (dir / "received")};
    ss.preload = c.server_preloaded;
    ss.env = {"VIPL_DB_LOG=1"};
    ss.err = dir / "server.err";
    Proc server(ss);
    wait_listening(ep, c.server_preloaded && preloaded());

    Spawn cs;
    if (is_unix)
        cs.argv = {"nc", "-N", "-U", ep.path};
    else
        cs.argv = {"nc", "-N", "127.0.0.1", std::to_string(ep.port)};
    cs.preload = c.client_preloaded;
    cs.env = {"VIPL_DB_LOG=1"};
    cs.in_pipe = true;
    cs.out = dir / "client-received";
    cs.err = dir / "client.err";
    Proc client(cs);
    constexpr size_t kSize = 256 << 10;
    write_file(dir / "sent", random_bytes(kSize, 5));
    REQUIRE(client.write_in(read_file(dir / "sent")));
    for (int i = 0; i < 1000 && file_size(dir / "received") < kSize; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(file_size(dir / "received") == kSize);

    // The connection is open (the client's stdin is): which transport carries it.
    bool both = c.client_preloaded && c.server_preloaded;
    std::vector<StatRow> srv =
        both ? tree_when_riding(server.pid(), "server", 1) : stat_tree(server.pid());
    std::vector<StatRow> cli =
        both ? tree_when_riding(client.pid(), "client", 1) : stat_tree(client.pid());
    if (both) {
        require_riding(srv, "server", 1, kSize, 0);
        require_riding(cli, "client", 1, 0, kSize);
    } else {
        INFO("server: " << describe(srv) << "\nclient: " << describe(cli));
        // A plain process has no table at all; the preloaded side stays on the kernel.
        REQUIRE((c.server_preloaded ? cli : srv).empty());
        if (c.server_preloaded) require_kernel(srv, "server", 1);
        if (c.client_preloaded) require_kernel(cli, "client", 1);
    }

    client.close_in();
    REQUIRE(client.wait(10000) == 0);
    // The server's child for this connection ends once it has written everything.
    for (int i = 0; i < 1000 && !descendants(server.pid()).empty(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(descendants(server.pid()).empty());
    REQUIRE(server.running());
    server.kill_all();
    require_same_file(dir / "sent", dir / "received");
    INFO("the client received: " << file_size(dir / "client-received") << " bytes");
    REQUIRE(file_size(dir / "client-received") == 0);
    require_no_interposer_lines(dir);
}
