// NICs of one address in one process share their listening sockets.  With
// one socket each on a port (SO_REUSEPORT), the kernel would hand some
// connections to a NIC that nobody waits on, where they stay unanswered.
#include "support.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

constexpr int kConnections = 8;

} // namespace

TEST_CASE("shared listener (fresh process)", "[.][tcp-listen-share]") {
    // TCP_PORT_RANGE=1: every discriminator of this process meets on one port.
    vt::Nic a("tcp:127.0.0.1"), b("tcp:127.0.0.1"), c("tcp:127.0.0.1");
    // A waits once on its own discriminator and gives up; it stays open.
    vt::Address first(a.nic, "first-service");
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    REQUIRE(VipConnectWait(a.nic, first.get(), 20, remote.get(), &ra, &conn) == VIP_TIMEOUT);

    // B serves another discriminator on the same port: every request for it reaches B.
    std::vector<VIP_VI_HANDLE> server(kConnections), client(kConnections);
    for (int k = 0; k < kConnections; ++k) {
        VIP_VI_ATTRIBUTES sa = vt::vi_attrs(b), ca = vt::vi_attrs(c);
        REQUIRE(VipCreateVi(b.nic, &sa, nullptr, nullptr, &server[k]) == VIP_SUCCESS);
        REQUIRE(VipCreateVi(c.nic, &ca, nullptr, nullptr, &client[k]) == VIP_SUCCESS);
    }
    std::atomic<int> accepted{0};
    std::thread t([&] {
        vt::Address second(b.nic, "second-service");
        for (int k = 0; k < kConnections; ++k) {
            vt::AddressBuffer from;
            VIP_VI_ATTRIBUTES fa;
            VIP_CONN_HANDLE h;
            if (VipConnectWait(b.nic, second.get(), 3000, from.get(), &fa, &h) != VIP_SUCCESS ||
                VipConnectAccept(h, server[k]) != VIP_SUCCESS)
                return;
            ++accepted;
        }
    });
    int connected = 0;
    for (int k = 0; k < kConnections; ++k) {
        vt::Address local(c.nic, "client-" + std::to_string(k)), target(c.nic, "second-service");
        VIP_RETURN rc = vt::connect_request(client[k], local.get(), target.get(), 3000);
        INFO("connection " << k);
        CHECK(rc == VIP_SUCCESS);
        if (rc != VIP_SUCCESS) break;
        ++connected;
    }
    t.join();
    CHECK(connected == kConnections);
    CHECK(accepted.load() == kConnections);
    for (int k = 0; k < kConnections; ++k) {
        vt::destroy_vi(client[k]);
        vt::destroy_vi(server[k]);
    }
}

TEST_CASE("NICs of one address share a port: a request reaches the NIC that waits on it",
          "[tcp][listen]") {
    // A port of its own for this run, below the ephemeral range.
    std::string base = std::to_string(21000 + getpid() % 9000);
    int status = vt::run_fresh("shared listener (fresh process)",
                               {"VIPL_TCP_PORT_RANGE=1", "VIPL_TCP_PORT_BASE=" + base}, 120);
    INFO(vt::status_text(status));
    CHECK(status == 0);
}

TEST_CASE("NICs of one address: one serves a discriminator, and another once it closes",
          "[tcp][listen]") {
    auto a = std::make_unique<vt::Nic>("tcp:127.0.0.1");
    vt::Nic b("tcp:127.0.0.1"), c("tcp:127.0.0.1");
    std::string disc = vt::unique_disc("-one-server");
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    vt::Address on_a(a->nic, disc), on_b(b.nic, disc);
    REQUIRE(VipConnectWait(a->nic, on_a.get(), 10, remote.get(), &ra, &conn) == VIP_TIMEOUT);
    CHECK(VipConnectWait(b.nic, on_b.get(), 10, remote.get(), &ra, &conn) == VIP_ERROR_RESOURCE);
    a.reset(); // closing A gives the discriminator up
    REQUIRE(VipConnectWait(b.nic, on_b.get(), 10, remote.get(), &ra, &conn) == VIP_TIMEOUT);

    // A request for it reaches B.
    VIP_VI_HANDLE server = nullptr, client = nullptr;
    VIP_VI_ATTRIBUTES sa = vt::vi_attrs(b), ca = vt::vi_attrs(c);
    REQUIRE(VipCreateVi(b.nic, &sa, nullptr, nullptr, &server) == VIP_SUCCESS);
    REQUIRE(VipCreateVi(c.nic, &ca, nullptr, nullptr, &client) == VIP_SUCCESS);
    std::atomic<VIP_RETURN> accepted{VIP_NOT_DONE};
    std::thread t([&] {
        vt::AddressBuffer from;
        VIP_VI_ATTRIBUTES fa;
        VIP_CONN_HANDLE h;
        VIP_RETURN rc = VipConnectWait(b.nic, on_b.get(), 5000, from.get(), &fa, &h);
        if (rc == VIP_SUCCESS) rc = VipConnectAccept(h, server);
        accepted = rc;
    });
    vt::Address local(c.nic, disc + "c"), target(c.nic, disc);
    CHECK(vt::connect_request(client, local.get(), target.get(), 5000) == VIP_SUCCESS);
    t.join();
    CHECK(accepted.load() == VIP_SUCCESS);
    vt::destroy_vi(client);
    vt::destroy_vi(server);
}
