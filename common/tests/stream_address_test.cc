// Stream and Listener addresses come from the kernel: on tcp the sockets' own addresses
// (the peer's real TCP port), on shm the processes' real pid, uid and gid.
#include "helpers.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

using namespace std::chrono_literals;
using vipl::deadline_in;
using vipl::Transport;

namespace {

// What one end tells the other of itself and of its peer, as text over the stream.
std::string describe(const vipl::Stream &s) {
    const vipl::Address &me = s.local_address(), &peer = s.peer_address();
    return std::to_string(me.port) + " " + std::to_string(me.pid) + " " +
           std::to_string(peer.port) + " " + std::to_string(peer.pid);
}

} // namespace

TEST_CASE("stream: local and peer addresses are what the kernel reports") {
    std::string base = CT_PROVIDER();
    bool tcp = base.find("+tcp") != std::string::npos;
    auto l = vt::bind_free(base);
    const vipl::Address &la = l.local_address();
    CHECK(la.provider == (tcp ? Transport::tcp : Transport::shm));
    CHECK(la.port == l.uri().port);
    if (tcp) {
        CHECK(la.host == "127.0.0.1");
        CHECK(la.pid == -1);
    } else {
        CHECK(la.pid == getpid());
        CHECK(la.uid == static_cast<long>(geteuid()));
    }

    // The client, another process, writes what it sees and waits for the end.
    int pid = vt::spawn_client(l.uri(), {}, [](vipl::Stream &s) {
        std::string text = describe(s) + "\n";
        std::error_code ec;
        if (s.write(std::as_bytes(std::span(text)), ec) != text.size()) return 3;
        return s.close(deadline_in(10s)) ? 4 : 0;
    });
    auto s = vt::accept_one(l);
    std::string got;
    std::error_code ec;
    char buf[128];
    while (got.find('\n') == std::string::npos) {
        size_t n = s.read(std::as_writable_bytes(std::span(buf)), deadline_in(10s), ec);
        REQUIRE(!ec);
        REQUIRE(n > 0);
        got.append(buf, n);
    }
    long c_local_port, c_local_pid, c_peer_port, c_peer_pid;
    REQUIRE(sscanf(got.c_str(), "%ld %ld %ld %ld", &c_local_port, &c_local_pid, &c_peer_port,
                   &c_peer_pid) == 4);
    const vipl::Address me = s.local_address(), peer = s.peer_address();
    INFO("local " << me.to_string() << ", peer " << peer.to_string() << ", client: " << got);
    CHECK(me.provider == peer.provider);
    if (tcp) {
        CHECK(me.provider == Transport::tcp);
        CHECK(peer.host == "127.0.0.1");
        CHECK(me.host == "127.0.0.1");
        CHECK(me.port == l.uri().port);
        // The client's own socket, which it reported: not anything it claimed in its request.
        CHECK(peer.port == c_local_port);
        CHECK(peer.port != 0);
        CHECK(c_peer_port == me.port);
        CHECK(peer.pid == -1);
        CHECK(peer.to_string() == "tcp 127.0.0.1:" + std::to_string(peer.port));
    } else {
        CHECK(me.provider == Transport::shm);
        CHECK(peer.pid == pid);
        CHECK(peer.uid == static_cast<long>(geteuid()));
        CHECK(peer.gid == static_cast<long>(getegid()));
        CHECK(me.pid == getpid());
        CHECK(me.port == l.uri().port);
        CHECK(peer.port == 0);
        CHECK(c_local_pid == pid);
        CHECK(c_peer_pid == getpid()); // the process that serves the listener
        CHECK(c_peer_port == l.uri().port);
        CHECK(peer.to_string().find(" pid " + std::to_string(pid) + " ") != std::string::npos);
    }
    // The client closes: read to the end (which answers its close), then it exits.
    std::byte b;
    for (int i = 0; i < 100 && s.read({&b, 1}, deadline_in(10s), ec) > 0; ++i) {
    }
    CHECK(vt::wait_child(pid) == 0);
    // The addresses outlive the connection.
    CHECK(s.peer_address() == peer);
    s.close(deadline_in(5s));
    CHECK(s.peer_address().empty());
    CHECK(s.local_address().to_string().empty());
}
