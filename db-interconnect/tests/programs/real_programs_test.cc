// Unmodified Debian programs of the patterns PostgreSQL uses, each checked byte for byte
// and shown (vipl-run --stat, taken while the connections are open) to ride vipl: an
// accept-then-fork server, an epoll server with a multi-threaded client, and a threaded
// HTTP server with a parallel HTTP client.  Over a unix socket and TCP loopback.
#include "census.h"
#include "endpoint.h"
#include "files.h"
#include "mode.h"
#include "process.h"
#include "scripts.h"
#include "table.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

using namespace dbt;

namespace {

// The interposer's fallbacks and errors reach stderr at this level (none are expected).
constexpr int kWarningsLevel = 1;
const std::string kLogWarnings = "VIPL_DB_LOG=" + std::to_string(kWarningsLevel);

// The clients of a case: preloaded or not, logging at kWarningsLevel to dir/client.err.
Spawn client_base(const TempDir &dir, bool preload) {
    Spawn s;
    s.preload = preload;
    s.env = {kLogWarnings};
    s.err = dir / "client.err";
    return s;
}

void require_quiet_log(const std::string &path) {
    INFO(path << ":\n" << read_file(path));
    REQUIRE(count_lines(path, "libvipl-db[") == 0);
}

} // namespace

TEST_CASE("programs: socat accept-then-fork server relays each connection through cat") {
    bool is_unix = GENERATE(true, false);
    TempDir dir;
    Endpoint ep = endpoint(is_unix, dir.path());
    INFO("over " << ep.name());
    Spawn ss;
    ss.argv = {"socat", ep.socat_listen() + ",fork", "EXEC:cat"};
    ss.preload = true;
    ss.env = {kLogWarnings};
    ss.err = dir / "server.err";
    Proc server(ss);
    wait_listening(ep, preloaded());

    constexpr int kClients = 3;
    constexpr size_t kSize = 2 << 20;
    SocatClients clients = start_socat_clients(ep, dir, kClients, kSize, 1, client_base(dir, true));

    // Every connection is open still (the clients' stdin is): one forked server child
    // per client, each riding vipl, as is each client.
    require_riding(tree_when_riding(server.pid(), "server", kClients), "server", kClients, kSize,
                   kSize);
    require_riding(stat_of(clients, kClients), "client", kClients, kSize, kSize);
    finish_socat_clients(clients);
    require_quiet_log(dir / "client.err");
    // The listener survived its children and serves again.
    REQUIRE(server.running());
    int fd = connect_to(ep);
    REQUIRE(fd >= 0);
    REQUIRE(send_all(fd, "again"));
    int end = 0;
    REQUIRE(read_for(fd, 5, 5000, &end) == "again");
    close(fd);
    server.kill_all();
    require_quiet_log(dir / "server.err");
}

TEST_CASE("programs: asyncio epoll echo server and a multi-threaded client") {
    bool is_unix = GENERATE(true, false);
    // A plain client stays on the kernel: the server's epoll set then holds only
    // connections settled there, registered as the program asked and waited on by the
    // kernel alone.
    bool client_preloaded = GENERATE(true, false);
    TempDir dir;
    Endpoint ep = endpoint(is_unix, dir.path());
    INFO("over " << ep.name() << (client_preloaded ? "" : ", plain client"));
    Proc server = logging_echo_server(ep, dir, kWarningsLevel);

    constexpr int kConnections = 6;
    constexpr size_t kSize = 1 << 20;
    EchoClients clients =
        start_echo_clients(ep, dir, kConnections, kSize, 7, client_base(dir, client_preloaded));

    if (client_preloaded) {
        require_riding(tree_when_riding(server.pid(), "server", kConnections), "server",
                       kConnections, kSize, kSize);
        require_riding(tree_when_riding(clients.proc.pid(), "client", kConnections), "client",
                       kConnections, kSize, kSize);
    }

    finish_echo_clients(clients);
    auto summary = stop_echo_server(server);
    REQUIRE(summary["connections"] == kConnections);
    REQUIRE(summary["echoed"] == static_cast<long>(kConnections * kSize));
    require_quiet_log(dir / "server.err");
    require_quiet_log(dir / "client.err");
}

TEST_CASE("programs: python3 -m http.server serves curl --parallel a file of a few MB") {
    TempDir dir;
    Endpoint ep = endpoint(false, dir.path());
    std::string root = dir / "www";
    REQUIRE(mkdir(root.c_str(), 0755) == 0);
    constexpr size_t kSize = 3 << 20;
    write_file(root + "/blob", random_bytes(kSize, 42));

    Spawn ss;
    ss.argv = {python(),    "-m",          "http.server", "--bind",
               "127.0.0.1", "--directory", root,          std::to_string(ep.port)};
    ss.preload = true;
    ss.env = {"VIPL_DB_LOG=2"};
    ss.err = dir / "server.err";
    Proc server(ss);
    wait_listening(ep, preloaded());

    // Three transfers at once, over in milliseconds (curl's --limit-rate paces by what it
    // has read, so it does not hold a transfer that arrives within its first look): too
    // short for --stat, each connection says what it rode in its log line instead.
    constexpr int kFetches = 3;
    std::string url = "http://127.0.0.1:" + std::to_string(ep.port) + "/blob";
    Spawn cs;
    cs.argv = {"curl", "--silent", "--show-error", "--fail", "--parallel", "--parallel-immediate"};
    for (int i = 0; i < kFetches; ++i) {
        cs.argv.push_back("-o");
        cs.argv.push_back(dir / ("got" + std::to_string(i)));
        cs.argv.push_back(url);
    }
    cs.preload = true;
    cs.env = {"VIPL_DB_LOG=2"};
    cs.err = dir / "client.err";
    Proc client(cs);
    REQUIRE(client.wait(30000) == 0);
    for (int i = 0; i < kFetches; ++i)
        require_same_file(root + "/blob", dir / ("got" + std::to_string(i)));
    server.kill_all();

    // http.server logs each request on stderr; the interposer one line per connection
    // (and the listener's), nothing else.
    std::string slog = read_file(dir / "server.err"), clog = read_file(dir / "client.err");
    INFO("server stderr:\n" << slog << "client stderr:\n" << clog);
    int expect = preloaded() ? kFetches : 0;
    REQUIRE(count_lines(dir / "server.err", "rides vipl (shm)") == expect);
    REQUIRE(count_lines(dir / "client.err", "rides vipl (shm)") == expect);
    REQUIRE(count_lines(dir / "server.err", "libvipl-db[") ==
            expect + count_lines(dir / "server.err", "listens for vipl clients"));
    REQUIRE(count_lines(dir / "client.err", "libvipl-db[") == expect);
    REQUIRE(count_lines(dir / "server.err", "\"GET /blob HTTP/1.1\" 200") == kFetches);
}
