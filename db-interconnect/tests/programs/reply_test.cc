// A reply reaches its client whole while the server, having sent it with one blocking
// send, is busy elsewhere and makes no call on the connection: a blocking send hands
// everything over before it returns, as a kernel socket's does (db-interconnect/README.md).
// The client is socat: it sends a request line, and writes what it receives to a file.
#include "endpoint.h"
#include "files.h"
#include "mode.h"
#include "process.h"
#include "table.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using namespace dbt;

TEST_CASE("programs: a reply arrives whole while its sender is busy elsewhere") {
    size_t size = GENERATE(size_t{256} << 10, size_t{4} << 20);
    bool is_unix = GENERATE(true, false);
    TempDir dir;
    Endpoint ep = endpoint(is_unix, dir.path());
    INFO(size << " bytes over " << ep.name());
    constexpr double kBusySeconds = 4;
    Spawn ss;
    ss.argv = script("reply_server.py");
    for (const std::string &a : ep.args()) ss.argv.push_back(a);
    for (const std::string &a :
         {std::string("--bytes"), std::to_string(size), std::string("--seconds"),
          std::to_string(kBusySeconds), std::string("--sent"), dir / "sent"})
        ss.argv.push_back(a);
    ss.preload = true;
    ss.env = {"VIPL_DB_LOG=1"};
    ss.out_pipe = true;
    ss.err = dir / "server.err";
    Proc server(ss);
    server.require_output("listening", 10000);
    wait_listening(ep, preloaded(), 10000, server.pid());

    Spawn cs;
    cs.argv = {"socat", "STDIO", ep.socat_connect()};
    cs.preload = true;
    cs.env = {"VIPL_DB_LOG=1"};
    cs.in_pipe = true;
    cs.out = dir / "got";
    cs.err = dir / "client.err";
    Proc client(cs);
    REQUIRE(client.write_in("request\n"));
    // Well within the server's busy time: a local transfer of a few MB takes milliseconds
    // (hundreds on a loaded machine).
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 250 && file_size(dir / "got") < size; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO("the client had " << file_size(dir / "got") << " bytes after " << took << " s");
    REQUIRE(file_size(dir / "got") == size);
    require_riding(tree_when_riding(server.pid(), "server", 1), "server", 1, 0, size);
    require_riding(tree_when_riding(client.pid(), "client", 1), "client", 1, size, 0);
    client.close_in();
    REQUIRE(client.wait(15000) == 0);
    REQUIRE(server.wait(5000) == 0);
    require_same_file(dir / "sent", dir / "got");
}
