// VipQueryViEndpoints on tcp believes the socket, not the peer: a peer that
// claims another host in its Hello is still reported at its real address.
#include "raw_peer.h"
#include "support.h"

#include <arpa/inet.h>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

TEST_CASE("A peer's claimed address does not change VipQueryViEndpoints", "[tcp][endpoints]") {
    using namespace vipl::tcp;
    vt::Nic n("tcp:127.0.0.1");
    uint16_t port = vt::raw_listen(n.nic);
    REQUIRE(port != 0);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n, VIP_SERVICE_RELIABLE_DELIVERY, 4096);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);

    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(s >= 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(s, reinterpret_cast<sockaddr *>(&to), sizeof to) == 0);
    sockaddr_in me{};
    socklen_t len = sizeof me;
    REQUIRE(getsockname(s, reinterpret_cast<sockaddr *>(&me), &len) == 0);

    // The Hello says 10.1.2.3; the Ack goes with it, so one thread plays both sides.
    const uint8_t claimed[4] = {10, 1, 2, 3};
    Hello h{};
    h.type = kHelloRequest;
    h.reliability = VIP_SERVICE_RELIABLE_DELIVERY;
    h.mtu = 4096;
    h.host_len = 4;
    memcpy(h.host, claimed, 4);
    h.disc_len = 4;
    memcpy(h.disc, "liar", 4);
    h.want_len = 2;
    h.want[0] = static_cast<uint8_t>(port >> 8);
    h.want[1] = static_cast<uint8_t>(port);
    h.window = 1 << 16;
    uint8_t out[2 * kHelloWire];
    encode_hello(h, out);
    h.type = kHelloAck;
    encode_hello(h, out + kHelloWire);
    REQUIRE(send(s, out, sizeof out, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof out));

    vt::Address local(n.nic, std::string{static_cast<char>(port >> 8), static_cast<char>(port)});
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    REQUIRE(VipConnectWait(n.nic, local.get(), vt::kWaitMs, remote.get(), &ra, &conn) ==
            VIP_SUCCESS);
    // VIPL's own answer repeats the claim...
    REQUIRE(remote.get()->HostAddressLen == 4);
    CHECK(memcmp(remote.get()->HostAddress, claimed, 4) == 0);
    REQUIRE(VipConnectAccept(conn, vi) == VIP_SUCCESS);
    // ...the kernel's does not.
    VIP_VI_ENDPOINTS e;
    REQUIRE(VipQueryViEndpoints(vi, &e) == VIP_SUCCESS);
    CHECK(e.Kind == VIP_ENDPOINTS_SOCKET);
    REQUIRE(e.RemoteSocket.ss_family == AF_INET);
    auto &peer = reinterpret_cast<const sockaddr_in &>(e.RemoteSocket);
    CHECK(peer.sin_addr.s_addr == htonl(INADDR_LOOPBACK));
    CHECK(peer.sin_port == me.sin_port);
    auto &mine = reinterpret_cast<const sockaddr_in &>(e.LocalSocket);
    CHECK(ntohs(mine.sin_port) == port);
    close(s);
    vt::destroy_vi(vi);
}
