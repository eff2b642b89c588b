// The connection wait fd (VipGetConnWaitFd) on tcp, where a request can
// arrive three ways: a fresh connection whose Hello is still to come, one
// another process sharing the port hands over, and one whose Hello comes in
// pieces.  A request for another discriminator on the same port must leave
// the fd quiet once a zero-timeout VipConnectWait has sorted it.
#include "raw_peer.h"
#include "support.h"

#include <arpa/inet.h>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

VIP_RETURN take(VIP_NIC_HANDLE nic, vt::Address &local, VIP_CONN_HANDLE *conn) {
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    return VipConnectWait(nic, local.get(), 0, remote.get(), &ra, conn);
}

// A tcp NIC's VI, connecting to disc from a forked child; exit 0 once connected.
int spawn_client(const std::string &disc, vt::Pipe &go) {
    return vt::spawn_child([&] {
        VIP_NIC_HANDLE nic;
        VIP_PROTECTION_HANDLE ptag;
        if (VipOpenNic("tcp:127.0.0.1", &nic) != VIP_SUCCESS ||
            VipCreatePtag(nic, &ptag) != VIP_SUCCESS)
            return 1;
        VIP_VI_ATTRIBUTES va{};
        va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
        va.MaxTransferSize = 4096;
        va.Ptag = ptag;
        VIP_VI_HANDLE vi;
        if (VipCreateVi(nic, &va, nullptr, nullptr, &vi) != VIP_SUCCESS) return 2;
        vt::Address local(nic, vt::unique_disc("-cl")), target(nic, disc);
        VIP_VI_ATTRIBUTES ra;
        if (vt::connect_request(vi, local.get(), target.get(), 4 * vt::kWaitMs, &ra) != VIP_SUCCESS)
            return 3;
        char c;
        go.get(&c, 4 * vt::kWaitMs);
        return 0;
    });
}

} // namespace

TEST_CASE("A request whose Hello comes in pieces wakes the wait fd as each piece arrives",
          "[tcp][waitfd]") {
    vt::Nic n("tcp:127.0.0.1");
    uint16_t port = vt::raw_listen(n.nic);
    REQUIRE(port != 0);
    vt::Address local(n.nic, std::string{static_cast<char>(port >> 8), static_cast<char>(port)});
    int fd = -1;
    REQUIRE(VipGetConnWaitFd(n.nic, local.get(), &fd) == VIP_SUCCESS);
    CHECK_FALSE(vt::readable(fd, 0));

    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(s >= 0);
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    memcpy(&to.sin_addr, local.get()->HostAddress, 4);
    REQUIRE(connect(s, reinterpret_cast<sockaddr *>(&to), sizeof to) == 0);
    // The connection alone: readable, yet nothing to take; quiet once looked at.
    VIP_CONN_HANDLE conn = nullptr;
    REQUIRE(vt::readable(fd, vt::kWaitMs));
    CHECK(take(n.nic, local, &conn) == VIP_TIMEOUT);
    CHECK_FALSE(vt::readable(fd, 0));

    using namespace vipl::tcp;
    Hello h{};
    h.type = kHelloRequest;
    h.reliability = VIP_SERVICE_RELIABLE_DELIVERY;
    h.mtu = 4096;
    h.host_len = 4;
    memcpy(h.host, local.get()->HostAddress, 4);
    h.disc_len = 3;
    memcpy(h.disc, "raw", 3);
    h.want_len = 2;
    memcpy(h.want, local.get()->HostAddress + 4, 2);
    h.window = 1 << 16;
    uint8_t wire[kHelloWire];
    encode_hello(h, wire);
    size_t half = kHelloWire / 2;
    REQUIRE(send(s, wire, half, MSG_NOSIGNAL) == static_cast<ssize_t>(half));
    REQUIRE(vt::readable(fd, vt::kWaitMs));
    CHECK(take(n.nic, local, &conn) == VIP_TIMEOUT);
    CHECK_FALSE(vt::readable(fd, 0));
    REQUIRE(send(s, wire + half, kHelloWire - half, MSG_NOSIGNAL) ==
            static_cast<ssize_t>(kHelloWire - half));
    REQUIRE(vt::readable(fd, vt::kWaitMs));
    REQUIRE(take(n.nic, local, &conn) == VIP_SUCCESS);
    CHECK_FALSE(vt::readable(fd, 0));
    CHECK(VipConnectReject(conn) == VIP_SUCCESS);
    close(s);
}

TEST_CASE("two discriminators on one port (fresh process)", "[.][tcp-waitfd-port]") {
    vt::Nic n("tcp:127.0.0.1");
    std::string d1 = vt::unique_disc("-first"), d2 = vt::unique_disc("-second");
    vt::Address a1(n.nic, d1), a2(n.nic, d2);
    int fd1 = -1, fd2 = -1;
    REQUIRE(VipGetConnWaitFd(n.nic, a1.get(), &fd1) == VIP_SUCCESS);
    REQUIRE(VipGetConnWaitFd(n.nic, a2.get(), &fd2) == VIP_SUCCESS);
    vt::Pipe go;
    int pid = spawn_client(d2, go);
    // Only d2 is asked for.  d1's fd wakes for what arrives on the port; once
    // its zero-timeout wait has sorted a complete request for d2, it is quiet
    // while that request waits for d2's server.
    VIP_CONN_HANDLE conn = nullptr;
    bool sorted = false;
    for (int round = 0; round < 100 && !sorted; ++round) {
        REQUIRE(vt::readable(fd1, 4 * vt::kWaitMs));
        REQUIRE(take(n.nic, a1, &conn) == VIP_TIMEOUT);
        sorted = !vt::readable(fd1, 0) && vt::readable(fd2, 0);
    }
    CHECK(sorted);
    CHECK(take(n.nic, a1, &conn) == VIP_TIMEOUT);
    CHECK_FALSE(vt::readable(fd1, 0));
    CHECK(vt::readable(fd2, 0));
    REQUIRE(take(n.nic, a2, &conn) == VIP_SUCCESS);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n, VIP_SERVICE_RELIABLE_DELIVERY, 4096);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    REQUIRE(VipConnectAccept(conn, vi) == VIP_SUCCESS);
    CHECK_FALSE(vt::readable(fd1, 0));
    CHECK_FALSE(vt::readable(fd2, 0));
    go.put('q');
    CHECK(vt::wait_child(pid, 20) == 0);
    vt::destroy_vi(vi);
}

TEST_CASE("A request for another discriminator of the port leaves the wait fd quiet once sorted",
          "[tcp][waitfd]") {
    std::string base = std::to_string(21000 + (getpid() * 7) % 9000);
    int status = vt::run_fresh("two discriminators on one port (fresh process)",
                               {"VIPL_TCP_PORT_RANGE=1", "VIPL_TCP_PORT_BASE=" + base}, 60);
    INFO(vt::status_text(status));
    CHECK(status == 0);
}

TEST_CASE("two processes on one port (fresh process)", "[.][tcp-waitfd-handover]") {
    // A serves d1, B serves d2, both on one TCP port: the kernel spreads the
    // connections over their two listening sockets, so some requests for d1
    // land at B, which hands them over.  Each loops over poll() of its wait
    // fd and a control pipe; nobody asks for d2.
    std::string d1 = vt::unique_disc("-a"), d2 = vt::unique_disc("-b");
    vt::Pipe a_up, a_down, b_up, b_down;
    auto server = [](const std::string &disc, bool takes, vt::Pipe &up, vt::Pipe &down) {
        return vt::spawn_child([&, disc, takes]() -> int {
            VIP_NIC_HANDLE nic;
            VIP_PROTECTION_HANDLE ptag;
            if (VipOpenNic("tcp:127.0.0.1", &nic) != VIP_SUCCESS ||
                VipCreatePtag(nic, &ptag) != VIP_SUCCESS)
                return 10;
            vt::Address local(nic, disc);
            int fd;
            if (VipGetConnWaitFd(nic, local.get(), &fd) != VIP_SUCCESS) return 11;
            up.put('r');
            for (int round = 0; round < 10000; ++round) {
                pollfd fds[2] = {{down.fd[0], POLLIN, 0}, {fd, POLLIN, 0}};
                if (poll(fds, 2, 20 * vt::kWaitMs) <= 0) return 12;
                if (fds[0].revents) // done: nothing may be left that wakes the fd
                    return vt::readable(fd, 0) ? 13 : 0;
                VIP_CONN_HANDLE conn;
                VIP_RETURN rc = take(nic, local, &conn);
                if (rc == VIP_TIMEOUT) {
                    up.put('w'); // a wake-up with nothing for us: a connection sorted here
                    continue;
                }
                if (rc != VIP_SUCCESS || !takes) return 14;
                VIP_VI_ATTRIBUTES va{};
                va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
                va.MaxTransferSize = 4096;
                va.Ptag = ptag;
                VIP_VI_HANDLE vi;
                if (VipCreateVi(nic, &va, nullptr, nullptr, &vi) != VIP_SUCCESS ||
                    VipConnectAccept(conn, vi) != VIP_SUCCESS)
                    return 15;
                up.put('a');
            }
            return 16;
        });
    };
    int a = server(d1, true, a_up, a_down);
    int b = server(d2, false, b_up, b_down);
    char c;
    REQUIRE(a_up.get(&c, 4 * vt::kWaitMs));
    REQUIRE(b_up.get(&c, 4 * vt::kWaitMs));

    vt::Nic n("tcp:127.0.0.1");
    std::vector<VIP_VI_HANDLE> vis;
    int accepted = 0, b_wakes = 0;
    for (int k = 0; k < 64 && (k < 8 || b_wakes == 0); ++k) {
        VIP_VI_ATTRIBUTES va = vt::vi_attrs(n, VIP_SERVICE_RELIABLE_DELIVERY, 4096);
        VIP_VI_HANDLE vi;
        REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
        vis.push_back(vi);
        vt::Address mine(n.nic, vt::unique_disc("-c")), target(n.nic, d1);
        VIP_VI_ATTRIBUTES ra;
        INFO("connection " << k);
        REQUIRE(vt::connect_request(vi, mine.get(), target.get(), 4 * vt::kWaitMs, &ra) ==
                VIP_SUCCESS);
        // A accepted it; whatever B saw of it happened before.
        while (a_up.get(&c, 0)) accepted += c == 'a';
        while (b_up.get(&c, 0)) b_wakes += c == 'w';
    }
    // B woke only for connections that landed there (nobody asks for d2), and
    // A accepted every one: those were handed over, and woke A.
    CHECK(b_wakes > 0);
    a_down.put('q');
    b_down.put('q');
    int sa = vt::wait_child(a, 20), sb = vt::wait_child(b, 20);
    while (a_up.get(&c, 0)) accepted += c == 'a';
    CHECK(accepted == static_cast<int>(vis.size()));
    INFO("A: " << vt::status_text(sa) << ", B: " << vt::status_text(sb));
    CHECK(sa == 0);
    CHECK(sb == 0);
    for (VIP_VI_HANDLE vi : vis) vt::destroy_vi(vi);
}

TEST_CASE("A request handed over between processes sharing a port wakes the one that serves it",
          "[tcp][waitfd][process]") {
    std::string base = std::to_string(21000 + (getpid() * 13) % 9000);
    int status = vt::run_fresh("two processes on one port (fresh process)",
                               {"VIPL_TCP_PORT_RANGE=1", "VIPL_TCP_PORT_BASE=" + base}, 120);
    INFO(vt::status_text(status));
    CHECK(status == 0);
}
