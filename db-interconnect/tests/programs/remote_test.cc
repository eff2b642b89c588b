// Across hosts (two network namespaces joined by a veth pair): a client rides vipl over
// the tcp provider to a server its VIPL_DB_REMOTE lists, and stays on the kernel, writing
// nothing of its own, to one it does not list (no marker reaches across hosts).  The
// server is the asyncio echo server, the clients socat.
#include "endpoint.h"
#include "files.h"
#include "hosts.h"
#include "mode.h"
#include "process.h"
#include "scripts.h"
#include "table.h"

#include <catch2/catch.hpp>

using namespace dbt;

TEST_CASE("programs: across hosts, a server in VIPL_DB_REMOTE rides the tcp provider") {
    std::string why = hosts_unavailable();
    INFO("network namespaces: " << why);
    REQUIRE(why.empty());
    bool listed = GENERATE(true, false);
    INFO((listed ? "the client lists the server" : "the client does not list the server"));
    HostPair hosts;
    TempDir dir;
    Endpoint ep;
    ep.host = hosts.address(1);
    ep.port = 5432;

    Spawn ss;
    ss.preload = true;
    ss.netns = hosts.name(1);
    ss.env = {"VIPL_DB_LOG=1"};
    ss.err = dir / "server.err";
    Proc server = echo_server(ep, ss);

    constexpr int kConnections = 3;
    constexpr size_t kSize = 1 << 20;
    Spawn cs;
    cs.preload = true;
    cs.netns = hosts.name(0);
    cs.env = {"VIPL_DB_LOG=1"};
    if (listed) cs.env.push_back("VIPL_DB_REMOTE=tcp:" + ep.host + ":" + std::to_string(ep.port));
    cs.err = dir / "client.err";
    SocatClients clients = start_socat_clients(ep, dir, kConnections, kSize, 31, cs);

    const char *trans = listed ? "tcp" : "kernel";
    std::vector<StatRow> srv = tree_when_riding(server.pid(), "server", kConnections, trans);
    std::vector<StatRow> cli = stat_of(clients, kConnections, trans);
    if (listed) {
        require_riding(srv, "server", kConnections, kSize, kSize, "tcp");
        require_riding(cli, "client", kConnections, kSize, kSize, "tcp");
    } else {
        require_kernel(srv, "server", kConnections);
        require_kernel(cli, "client", kConnections);
    }
    finish_socat_echo(clients, server, kConnections * kSize);
    require_no_interposer_lines(dir);
}
