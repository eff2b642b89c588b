// A client and a server of different OS users: the kernel refuses cross-memory attach
// between them (one way at least), so the shm provider copies through its rings
// instead; the connection must still ride vipl and carry every byte.  The server is the
// asyncio echo server, the clients socat.
#include "endpoint.h"
#include "files.h"
#include "mode.h"
#include "process.h"
#include "scripts.h"
#include "table.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

using namespace dbt;

namespace {

// The real uid of a process, from /proc/<pid>/status.
int uid_of(int pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("Uid:", 0) == 0) return std::atoi(line.c_str() + 4);
    return -1;
}

} // namespace

TEST_CASE("programs: a client of another user than the server rides vipl over shm") {
    INFO("changing users needs root");
    REQUIRE(geteuid() == 0);
    bool client_is_nobody = GENERATE(true, false);
    bool is_unix = GENERATE(true, false);
    TempDir dir;
    // A folder both users may create sockets and files in.
    std::string shared = dir / "shared";
    REQUIRE(mkdir(shared.c_str(), 0777) == 0);
    REQUIRE(chmod(shared.c_str(), 0777) == 0);
    Endpoint ep = endpoint(is_unix, shared);
    INFO((client_is_nobody ? "client" : "server") << " runs as nobody, over " << ep.name());

    Spawn ss;
    ss.preload = true;
    ss.env = {"VIPL_DB_LOG=1"};
    ss.err = dir / "server.err";
    if (!client_is_nobody) ss.user = "nobody";
    Proc server = echo_server(ep, ss, "777");

    constexpr int kConnections = 2;
    constexpr size_t kSize = 4 << 20;
    Spawn cs;
    cs.preload = true;
    cs.env = {"VIPL_DB_LOG=1"};
    cs.err = dir / "client.err";
    if (client_is_nobody) cs.user = "nobody";
    SocatClients clients = start_socat_clients(ep, dir, kConnections, kSize, 11, cs);

    REQUIRE(uid_of(client_is_nobody ? clients.procs[0].pid() : server.pid()) == 65534);
    REQUIRE(uid_of(client_is_nobody ? server.pid() : clients.procs[0].pid()) == 0);
    require_riding(tree_when_riding(server.pid(), "server", kConnections), "server", kConnections,
                   kSize, kSize);
    require_riding(stat_of(clients, kConnections), "client", kConnections, kSize, kSize);

    finish_socat_echo(clients, server, kConnections * kSize);
    require_no_interposer_lines(dir);
}
