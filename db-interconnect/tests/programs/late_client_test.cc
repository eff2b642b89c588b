// A server answers before its client comes to the rendezvous (the client wrote its
// request and reads only after the server answered; VIPL_DB_NEGOTIATE_MS=100 on the
// server): the answer waits for the client's stream, then the server gives the
// rendezvous up and both ends go on on the kernel.  Each side says so once, the echo is
// whole, and the server reads the client's close as an end of file (not as a reset).  An
// accept-then-fork server whose children block, over a unix socket and TCP loopback.
// Files order the two sides, not pauses: on a loaded host a client slow to write finds
// the REPLY already there and comes to the rendezvous with its request, and a server
// slow to read opens its rendezvous after any fixed pause of the client has run out.
#include "endpoint.h"
#include "files.h"
#include "mode.h"
#include "process.h"
#include "scripts.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using namespace dbt;

TEST_CASE("programs: a server that answers before its client comes goes on on the kernel") {
    bool is_unix = GENERATE(true, false);
    TempDir dir;
    Endpoint ep = endpoint(is_unix, dir.path());
    INFO("over " << ep.name());
    // The child reads (and so sends its REPLY) only after the client's request is
    // written, and says when its answer is written (the rendezvous given up by then).
    Proc server(preloaded_script(
        "fork_echo_server.py", ep,
        {"--log", dir / "served", "--read-after", dir / "sent", "--answered", dir / "answered"},
        {"VIPL_DB_LOG=2", "VIPL_DB_NEGOTIATE_MS=100"}, dir / "server.err"));
    server.require_output("listening", 10000);
    wait_listening(ep, preloaded(), 10000, server.pid());

    constexpr int kBytes = 3000;
    Proc client(preloaded_script("late_client.py", ep,
                                 {"--sent", dir / "sent", "--read-after", dir / "answered"},
                                 {"VIPL_DB_LOG=2"}, dir / "client.err"));
    int st = client.wait(15000);
    // The child writes its line once the client's close reached it.
    for (int i = 0; i < 500 && count_lines(dir / "served", "") == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    INFO("client: " << client.output() << read_file(dir / "client.err"));
    INFO("server: " << read_file(dir / "server.err") << "served: " << read_file(dir / "served"));
    REQUIRE(st == 0);
    REQUIRE(count_lines(dir / "served", "echo " + std::to_string(kBytes)) == 1);
    REQUIRE(count_lines(dir / "served", "error") == 0);
    int once = preloaded() ? 1 : 0;
    REQUIRE(count_lines(dir / "server.err", "did not come to the rendezvous") == once);
    REQUIRE(count_lines(dir / "client.err", "could not reach the server's rendezvous") == once);
    REQUIRE(count_lines(dir / "client.err", "rides vipl") == 0);
    REQUIRE(count_lines(dir / "server.err", "rides vipl") == 0);
    server.kill_all();
}
