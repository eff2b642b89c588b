// Client-server connections: VipConnectWait, VipConnectAccept,
// VipConnectReject, VipConnectRequest, VipDisconnect.
#include "support.h"

#include <chrono>
#include <cstring>
#include <future>
#include <set>
#include <sys/wait.h>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

// One request as VipConnectWait returns it.
struct Request {
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES attrs{};
    VIP_CONN_HANDLE conn = nullptr;
};

VIP_RETURN wait_request(const vt::Nic &n, vt::Address &local, VIP_ULONG timeout, Request &r) {
    return VipConnectWait(n.nic, local.get(), timeout, r.remote.get(), &r.attrs, &r.conn);
}

VIP_VI_HANDLE make_vi(const vt::Nic &n, const VIP_VI_ATTRIBUTES &attrs) {
    VIP_VI_ATTRIBUTES a = attrs;
    VIP_VI_HANDLE vi = nullptr;
    REQUIRE(VipCreateVi(n.nic, &a, nullptr, nullptr, &vi) == VIP_SUCCESS);
    return vi;
}

// One message from `from` to `to` arrives intact (to has nothing else posted).
void check_link(VIP_VI_HANDLE from, vt::Memory &mf, VIP_VI_HANDLE to, vt::Memory &mt,
                const char *text) {
    size_t len = strlen(text) + 1;
    vt::set_desc(mt.desc(0), mt.base + 2048, 256, mt.mh);
    REQUIRE(VipPostRecv(to, mt.desc(0), mt.mh) == VIP_SUCCESS);
    memcpy(mf.base + 2048, text, len);
    vt::set_desc(mf.desc(0), mf.base + 2048, static_cast<uint32_t>(len), mf.mh);
    REQUIRE(VipPostSend(from, mf.desc(0), mf.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d = nullptr;
    REQUIRE(VipRecvWait(to, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d->CS.Length == len);
    CHECK(std::string(reinterpret_cast<char *>(mt.base + 2048)) == text);
    REQUIRE(VipSendWait(from, vt::kWaitMs, &d) == VIP_SUCCESS);
}

} // namespace

TEST_CASE("VipConnectWait times out when nobody connects", "[connect]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    vt::Address local(n.nic, vt::unique_disc("-to"));
    Request r;
    auto start = Clock::now();
    CHECK(wait_request(n, local, 100, r) == VIP_TIMEOUT);
    CHECK(Clock::now() - start < std::chrono::seconds(5));
    CHECK(r.conn == nullptr);
    CHECK(wait_request(n, local, 0, r) == VIP_TIMEOUT);
}

TEST_CASE("VipConnectWait checks its arguments", "[connect][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    vt::Address local(n.nic, vt::unique_disc("-wargs"));
    Request r;
    CHECK(VipConnectWait(nullptr, local.get(), 0, r.remote.get(), &r.attrs, &r.conn) ==
          VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipConnectWait(h, local.get(), 0, r.remote.get(), &r.attrs, &r.conn) ==
              VIP_INVALID_PARAMETER);
    CHECK(VipConnectWait(n.nic, nullptr, 0, r.remote.get(), &r.attrs, &r.conn) ==
          VIP_INVALID_PARAMETER);
    CHECK(VipConnectWait(n.nic, local.get(), 0, nullptr, &r.attrs, &r.conn) ==
          VIP_INVALID_PARAMETER);
    CHECK(VipConnectWait(n.nic, local.get(), 0, r.remote.get(), nullptr, &r.conn) ==
          VIP_INVALID_PARAMETER);
    CHECK(VipConnectWait(n.nic, local.get(), 0, r.remote.get(), &r.attrs, nullptr) ==
          VIP_INVALID_PARAMETER);
}

TEST_CASE("VipConnectRequest to a discriminator nobody waits on gives VIP_NO_MATCH", "[connect]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_VI_HANDLE vi = make_vi(n, vt::vi_attrs(n));
    std::string disc = vt::unique_disc("-nomatch");
    vt::Address local(n.nic, disc + "c"), remote(n.nic, disc);
    VIP_VI_ATTRIBUTES ra;
    auto start = Clock::now();
    CHECK(VipConnectRequest(vi, local.get(), remote.get(), 2000, &ra) == VIP_NO_MATCH);
    CHECK(Clock::now() - start < std::chrono::seconds(5));
    CHECK(vt::vi_state(vi) == VIP_STATE_IDLE);
    // A server on another discriminator does not match either.
    vt::Address elsewhere(n.nic, disc + "x");
    Request r;
    REQUIRE(wait_request(n, elsewhere, 0, r) == VIP_TIMEOUT);
    CHECK(VipConnectRequest(vi, local.get(), remote.get(), 2000, &ra) == VIP_NO_MATCH);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
}

TEST_CASE("VipConnectRequest checks its arguments and the VI's state", "[connect][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    VIP_VI_HANDLE vi = make_vi(nb, vt::vi_attrs(nb));
    std::string disc = vt::unique_disc("-rargs");
    vt::Address local(nb.nic, disc + "c"), remote(nb.nic, disc);
    VIP_VI_ATTRIBUTES ra;
    CHECK(VipConnectRequest(nullptr, local.get(), remote.get(), 100, &ra) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipConnectRequest(h, local.get(), remote.get(), 100, &ra) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectRequest(vi, nullptr, remote.get(), 100, &ra) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectRequest(vi, local.get(), nullptr, 100, &ra) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectRequest(vi, local.get(), remote.get(), 100, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(vt::vi_state(vi) == VIP_STATE_IDLE);

    // A host this NIC cannot reach: same address length, every byte changed.
    vt::Address far(nb.nic, disc);
    VIP_NET_ADDRESS *fa = far.get();
    for (int i = 0; i < fa->HostAddressLen; ++i) fa->HostAddress[i] ^= 0x5a;
    CHECK(VipConnectRequest(vi, local.get(), far.get(), 2000, &ra) == VIP_NOT_REACHABLE);
    CHECK(vt::vi_state(vi) == VIP_STATE_IDLE);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);

    // A connected VI cannot request again.
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    CHECK(VipConnectRequest(p.b, local.get(), remote.get(), 100, &ra) == VIP_INVALID_STATE);
    CHECK(vt::vi_state(p.b) == VIP_STATE_CONNECTED);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("Both sides learn each other's address and attributes", "[connect]") {
    std::string device = VT_DEVICE();
    vt::Nic ns(device), nc(device);
    std::string disc = vt::unique_disc("-info");
    vt::Address server(ns.nic, disc), client(nc.nic, disc + "-cli"), target(nc.nic, disc);
    VIP_VI_ATTRIBUTES sa = vt::vi_attrs(ns, VIP_SERVICE_RELIABLE_RECEPTION, 16384, true, false);
    VIP_VI_ATTRIBUTES ca = vt::vi_attrs(nc, VIP_SERVICE_RELIABLE_RECEPTION, 16384, false, true);
    VIP_VI_HANDLE svi = make_vi(ns, sa), cvi = make_vi(nc, ca);
    VIP_VI_ATTRIBUTES seen_by_client{};
    auto cl = std::async(std::launch::async, [&] {
        return vt::connect_request(cvi, client.get(), target.get(), vt::kWaitMs, &seen_by_client);
    });
    Request r;
    REQUIRE(wait_request(ns, server, vt::kWaitMs, r) == VIP_SUCCESS);
    CHECK(r.conn != nullptr);
    CHECK(r.remote.get()->HostAddressLen == nc.attrs.NicAddressLen);
    CHECK(memcmp(r.remote.get()->HostAddress, nc.attrs.LocalNicAddress, nc.attrs.NicAddressLen) ==
          0);
    CHECK(r.remote.discriminator() == disc + "-cli");
    CHECK(r.attrs.ReliabilityLevel == ca.ReliabilityLevel);
    CHECK(r.attrs.MaxTransferSize == ca.MaxTransferSize);
    CHECK(r.attrs.EnableRdmaWrite == VIP_FALSE);
    CHECK(r.attrs.EnableRdmaRead == VIP_TRUE);
    REQUIRE(VipConnectAccept(r.conn, svi) == VIP_SUCCESS);
    REQUIRE(cl.get() == VIP_SUCCESS);
    CHECK(seen_by_client.ReliabilityLevel == sa.ReliabilityLevel);
    CHECK(seen_by_client.MaxTransferSize == sa.MaxTransferSize);
    CHECK(seen_by_client.EnableRdmaWrite == VIP_TRUE);
    CHECK(seen_by_client.EnableRdmaRead == VIP_FALSE);
    CHECK(vt::vi_state(svi) == VIP_STATE_CONNECTED);
    CHECK(vt::vi_state(cvi) == VIP_STATE_CONNECTED);
    // The handle of an accepted request is used up.
    CHECK(VipConnectReject(r.conn) == VIP_INVALID_PARAMETER);
    VIP_VI_HANDLE spare = make_vi(ns, sa);
    CHECK(VipConnectAccept(r.conn, spare) == VIP_INVALID_PARAMETER);
    CHECK(vt::vi_state(spare) == VIP_STATE_IDLE);
    vt::Memory ms(ns, 8192), mc(nc, 8192);
    check_link(cvi, mc, svi, ms, "client to server");
    check_link(svi, ms, cvi, mc, "server to client");
    vt::destroy_vi(svi);
    vt::destroy_vi(cvi);
    vt::destroy_vi(spare);
}

TEST_CASE("A rejected request gives VIP_REJECT", "[connect]") {
    std::string device = VT_DEVICE();
    vt::Nic ns(device), nc(device);
    std::string disc = vt::unique_disc("-rej");
    vt::Address server(ns.nic, disc), client(nc.nic, disc + "c"), target(nc.nic, disc);
    VIP_VI_HANDLE cvi = make_vi(nc, vt::vi_attrs(nc));
    auto cl = std::async(std::launch::async, [&] {
        return vt::connect_request(cvi, client.get(), target.get(), vt::kWaitMs);
    });
    Request r;
    REQUIRE(wait_request(ns, server, vt::kWaitMs, r) == VIP_SUCCESS);
    CHECK(VipConnectReject(r.conn) == VIP_SUCCESS);
    CHECK(cl.get() == VIP_REJECT);
    CHECK(vt::vi_state(cvi) == VIP_STATE_IDLE);
    CHECK(VipConnectReject(r.conn) == VIP_INVALID_PARAMETER);

    // The VI can try again and be accepted.
    VIP_VI_HANDLE svi = make_vi(ns, vt::vi_attrs(ns));
    auto again = std::async(std::launch::async, [&] {
        return vt::connect_request(cvi, client.get(), target.get(), vt::kWaitMs);
    });
    Request r2;
    REQUIRE(wait_request(ns, server, vt::kWaitMs, r2) == VIP_SUCCESS);
    CHECK(VipConnectAccept(r2.conn, svi) == VIP_SUCCESS);
    CHECK(again.get() == VIP_SUCCESS);
    vt::destroy_vi(svi);
    vt::destroy_vi(cvi);
}

TEST_CASE("VipConnectReject refuses bad handles", "[connect][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    CHECK(VipConnectReject(nullptr) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles()) CHECK(VipConnectReject(h) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectReject(n.nic) == VIP_INVALID_PARAMETER);
}

TEST_CASE("A mismatched accept leaves the request pending for another VI", "[connect]") {
    std::string device = VT_DEVICE();
    vt::Nic ns(device), nc(device);
    std::string disc = vt::unique_disc("-mis");
    vt::Address server(ns.nic, disc), client(nc.nic, disc + "c"), target(nc.nic, disc);
    VIP_VI_HANDLE cvi = make_vi(nc, vt::vi_attrs(nc, VIP_SERVICE_RELIABLE_DELIVERY, 8192));
    auto cl = std::async(std::launch::async, [&] {
        return vt::connect_request(cvi, client.get(), target.get(), 8000);
    });
    Request r;
    REQUIRE(wait_request(ns, server, vt::kWaitMs, r) == VIP_SUCCESS);

    VIP_VI_HANDLE wrong_level = make_vi(ns, vt::vi_attrs(ns, VIP_SERVICE_UNRELIABLE, 8192));
    VIP_VI_HANDLE wrong_mtu = make_vi(ns, vt::vi_attrs(ns, VIP_SERVICE_RELIABLE_DELIVERY, 4096));
    VIP_VI_HANDLE good = make_vi(ns, vt::vi_attrs(ns, VIP_SERVICE_RELIABLE_DELIVERY, 8192));
    CHECK(VipConnectAccept(r.conn, wrong_level) == VIP_INVALID_RELIABILITY_LEVEL);
    CHECK(vt::vi_state(wrong_level) == VIP_STATE_IDLE);
    CHECK(VipConnectAccept(r.conn, wrong_mtu) == VIP_INVALID_MTU);
    CHECK(vt::vi_state(wrong_mtu) == VIP_STATE_IDLE);
    CHECK(cl.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
    CHECK(VipConnectAccept(r.conn, good) == VIP_SUCCESS);
    CHECK(cl.get() == VIP_SUCCESS);
    CHECK(vt::vi_state(good) == VIP_STATE_CONNECTED);
    vt::Memory ms(ns, 8192), mc(nc, 8192);
    check_link(cvi, mc, good, ms, "after two refusals");
    vt::destroy_vi(good);
    vt::destroy_vi(cvi);
    vt::destroy_vi(wrong_level);
    vt::destroy_vi(wrong_mtu);
}

TEST_CASE("VipConnectAccept checks its arguments and the VI's state", "[connect][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic ns(device), nc(device), other(device);
    std::string disc = vt::unique_disc("-aargs");
    vt::Address server(ns.nic, disc), client(nc.nic, disc + "c"), target(nc.nic, disc);
    VIP_VI_HANDLE cvi = make_vi(nc, vt::vi_attrs(nc));
    auto cl = std::async(std::launch::async, [&] {
        return vt::connect_request(cvi, client.get(), target.get(), 8000);
    });
    Request r;
    REQUIRE(wait_request(ns, server, vt::kWaitMs, r) == VIP_SUCCESS);
    VIP_VI_HANDLE good = make_vi(ns, vt::vi_attrs(ns));
    CHECK(VipConnectAccept(nullptr, good) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectAccept(r.conn, nullptr) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50)) {
        CHECK(VipConnectAccept(h, good) == VIP_INVALID_PARAMETER);
        CHECK(VipConnectAccept(r.conn, h) == VIP_INVALID_PARAMETER);
    }
    // A VI of another NIC.
    VIP_VI_HANDLE foreign = make_vi(other, vt::vi_attrs(other));
    CHECK(VipConnectAccept(r.conn, foreign) == VIP_INVALID_PARAMETER);
    CHECK(vt::vi_state(foreign) == VIP_STATE_IDLE);
    // A VI that is not Idle.
    vt::Pair busy = vt::connect_pair(ns, nc, vt::vi_attrs(ns), vt::vi_attrs(nc));
    CHECK(VipConnectAccept(r.conn, busy.a) == VIP_INVALID_STATE);
    CHECK(vt::vi_state(busy.a) == VIP_STATE_CONNECTED);
    // None of that consumed the request.
    CHECK(VipConnectAccept(r.conn, good) == VIP_SUCCESS);
    CHECK(cl.get() == VIP_SUCCESS);
    CHECK(VipConnectAccept(r.conn, good) == VIP_INVALID_PARAMETER);
    vt::destroy_vi(good);
    vt::destroy_vi(cvi);
    vt::destroy_vi(foreign);
    vt::destroy_vi(busy.a);
    vt::destroy_vi(busy.b);
}

TEST_CASE("Accepting a request the client gave up on gives VIP_TIMEOUT", "[connect]") {
    std::string device = VT_DEVICE();
    vt::Nic ns(device), nc(device);
    std::string disc = vt::unique_disc("-gaveup");
    vt::Address server(ns.nic, disc), client(nc.nic, disc + "c"), target(nc.nic, disc);
    VIP_VI_HANDLE cvi = make_vi(nc, vt::vi_attrs(nc));
    Request r0;
    REQUIRE(wait_request(ns, server, 0, r0) == VIP_TIMEOUT); // serve the discriminator
    VIP_VI_ATTRIBUTES ra;
    auto start = Clock::now();
    auto cl = std::async(std::launch::async, [&] {
        return VipConnectRequest(cvi, client.get(), target.get(), 300, &ra);
    });
    Request r;
    REQUIRE(wait_request(ns, server, vt::kWaitMs, r) == VIP_SUCCESS);
    CHECK(cl.get() == VIP_TIMEOUT);
    CHECK(Clock::now() - start < std::chrono::seconds(5));
    CHECK(vt::vi_state(cvi) == VIP_STATE_IDLE);
    VIP_VI_HANDLE svi = make_vi(ns, vt::vi_attrs(ns));
    CHECK(VipConnectAccept(r.conn, svi) == VIP_TIMEOUT);
    CHECK(vt::vi_state(svi) == VIP_STATE_IDLE);
    CHECK(VipDestroyVi(svi) == VIP_SUCCESS);
    CHECK(VipDestroyVi(cvi) == VIP_SUCCESS);
}

TEST_CASE("Two servers on different discriminators get their own clients", "[connect]") {
    std::string device = VT_DEVICE();
    vt::Nic ns(device), nc(device);
    std::string d1 = vt::unique_disc("-one"), d2 = vt::unique_disc("-two");
    vt::Address s1(ns.nic, d1), s2(ns.nic, d2);
    vt::Address t1(nc.nic, d1), t2(nc.nic, d2);
    vt::Address c1(nc.nic, d1 + "-c1"), c2(nc.nic, d2 + "-c2");
    VIP_VI_HANDLE sv1 = make_vi(ns, vt::vi_attrs(ns)), sv2 = make_vi(ns, vt::vi_attrs(ns));
    VIP_VI_HANDLE cv1 = make_vi(nc, vt::vi_attrs(nc)), cv2 = make_vi(nc, vt::vi_attrs(nc));
    Request r1, r2;
    auto serve = [&](vt::Address &a, Request &r, VIP_VI_HANDLE vi) {
        VIP_RETURN rc = wait_request(ns, a, 8000, r);
        return rc == VIP_SUCCESS ? VipConnectAccept(r.conn, vi) : rc;
    };
    auto srv1 = std::async(std::launch::async, [&] { return serve(s1, r1, sv1); });
    auto srv2 = std::async(std::launch::async, [&] { return serve(s2, r2, sv2); });
    // The second server's client first, to show arrival order does not matter.
    CHECK(vt::connect_request(cv2, c2.get(), t2.get(), vt::kWaitMs) == VIP_SUCCESS);
    CHECK(vt::connect_request(cv1, c1.get(), t1.get(), vt::kWaitMs) == VIP_SUCCESS);
    REQUIRE(srv1.get() == VIP_SUCCESS);
    REQUIRE(srv2.get() == VIP_SUCCESS);
    CHECK(r1.remote.discriminator() == d1 + "-c1");
    CHECK(r2.remote.discriminator() == d2 + "-c2");
    vt::Memory ms(ns, 8192), mc(nc, 8192);
    check_link(cv1, mc, sv1, ms, "client one");
    check_link(cv2, mc, sv2, ms, "client two");
    for (VIP_VI_HANDLE v : {sv1, sv2, cv1, cv2}) vt::destroy_vi(v);
}

TEST_CASE("Requests that arrive between two VipConnectWait calls are queued", "[connect]") {
    std::string device = VT_DEVICE();
    vt::Nic ns(device), nc(device);
    std::string disc = vt::unique_disc("-queue");
    vt::Address server(ns.nic, disc), target(nc.nic, disc);
    vt::Address c1(nc.nic, disc + "-a"), c2(nc.nic, disc + "-b");
    Request r0;
    REQUIRE(wait_request(ns, server, 0, r0) == VIP_TIMEOUT);
    VIP_VI_HANDLE cv1 = make_vi(nc, vt::vi_attrs(nc)), cv2 = make_vi(nc, vt::vi_attrs(nc));
    VIP_VI_ATTRIBUTES ra1, ra2;
    // Not retried on VIP_NO_MATCH: the server is between two waits and must queue them.
    auto cl1 = std::async(std::launch::async, [&] {
        return VipConnectRequest(cv1, c1.get(), target.get(), 8000, &ra1);
    });
    auto cl2 = std::async(std::launch::async, [&] {
        return VipConnectRequest(cv2, c2.get(), target.get(), 8000, &ra2);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::set<std::string> seen;
    std::vector<VIP_VI_HANDLE> servers;
    for (int i = 0; i < 2; ++i) {
        Request r;
        REQUIRE(wait_request(ns, server, vt::kWaitMs, r) == VIP_SUCCESS);
        seen.insert(r.remote.discriminator());
        servers.push_back(make_vi(ns, vt::vi_attrs(ns)));
        CHECK(VipConnectAccept(r.conn, servers.back()) == VIP_SUCCESS);
    }
    CHECK(cl1.get() == VIP_SUCCESS);
    CHECK(cl2.get() == VIP_SUCCESS);
    CHECK(seen == std::set<std::string>{disc + "-a", disc + "-b"});
    for (VIP_VI_HANDLE v : servers) vt::destroy_vi(v);
    vt::destroy_vi(cv1);
    vt::destroy_vi(cv2);
}

TEST_CASE("VipConnectRequest times out when the server does not answer", "[connect]") {
    std::string device = VT_DEVICE();
    vt::Nic ns(device), nc(device);
    std::string disc = vt::unique_disc("-silent");
    vt::Address server(ns.nic, disc), client(nc.nic, disc + "c"), target(nc.nic, disc);
    VIP_VI_HANDLE cvi = make_vi(nc, vt::vi_attrs(nc));
    Request r0;
    REQUIRE(wait_request(ns, server, 0, r0) == VIP_TIMEOUT);
    VIP_VI_ATTRIBUTES ra;
    auto start = Clock::now();
    CHECK(VipConnectRequest(cvi, client.get(), target.get(), 200, &ra) == VIP_TIMEOUT);
    CHECK(Clock::now() - start < std::chrono::seconds(5));
    CHECK(vt::vi_state(cvi) == VIP_STATE_IDLE);
    CHECK(VipDestroyVi(cvi) == VIP_SUCCESS);
}

TEST_CASE("A discriminator is served by one process at a time", "[connect][process]") {
    std::string device = VT_DEVICE();
    std::string disc = vt::unique_disc("-owned");
    vt::Pipe up, down;
    int pid = vt::spawn_child([&] {
        VIP_NIC_HANDLE nic;
        if (VipOpenNic(device.c_str(), &nic) != VIP_SUCCESS) return 1;
        vt::Address local(nic, disc);
        vt::AddressBuffer remote;
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        if (VipConnectWait(nic, local.get(), 0, remote.get(), &ra, &conn) != VIP_TIMEOUT) return 2;
        up.put('s');
        char c;
        down.get(&c, 10000);
        VipCloseNic(nic);
        return 0;
    });
    char c = 0;
    REQUIRE(up.get(&c, 10000));
    vt::Nic n(device);
    vt::Address local(n.nic, disc);
    Request r;
    CHECK(wait_request(n, local, 0, r) == VIP_ERROR_RESOURCE);
    down.put('q');
    int status = vt::wait_child(pid, 10);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    // Once the other process is gone the discriminator is free.
    CHECK(wait_request(n, local, 0, r) == VIP_TIMEOUT);
}

TEST_CASE("VipDisconnect returns a VI to Idle and flushes its queues", "[connect]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 1 << 20), mb(nb, 1 << 20);
    // Reliable reception: sends stay outstanding while the receiver makes no call.
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na, VIP_SERVICE_RELIABLE_RECEPTION),
                                  vt::vi_attrs(nb, VIP_SERVICE_RELIABLE_RECEPTION));
    for (int i = 0; i < 3; ++i) {
        vt::set_desc(ma.desc(i), ma.base + 4096 + 256 * i, 256, ma.mh);
        REQUIRE(VipPostRecv(p.a, ma.desc(i), ma.mh) == VIP_SUCCESS);
    }
    for (int i = 0; i < 2; ++i) {
        uint32_t len = i ? 100000 : 16;
        vt::set_desc(ma.desc(10 + i), ma.base + 65536 + 200000 * i, len, ma.mh);
        REQUIRE(VipPostSend(p.a, ma.desc(10 + i), ma.mh) == VIP_SUCCESS);
    }
    REQUIRE(VipDisconnect(p.a) == VIP_SUCCESS);
    CHECK(vt::vi_state(p.a) == VIP_STATE_IDLE);
    for (int i = 0; i < 3; ++i) {
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipRecvDone(p.a, &d) == VIP_DESCRIPTOR_ERROR);
        CHECK(d == ma.desc(i));
        CHECK((d->CS.Status & VIP_STATUS_DONE) != 0);
        CHECK((d->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR) != 0);
        CHECK((d->CS.Status & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_RECEIVE);
        CHECK(d->CS.Length == 0);
    }
    for (int i = 0; i < 2; ++i) {
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipSendDone(p.a, &d) == VIP_DESCRIPTOR_ERROR);
        CHECK(d == ma.desc(10 + i));
        CHECK((d->CS.Status & VIP_STATUS_DONE) != 0);
        CHECK((d->CS.Status & VIP_STATUS_ERROR_MASK) == VIP_STATUS_DESC_FLUSHED_ERROR);
        CHECK((d->CS.Status & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_SEND);
    }
    VIP_DESCRIPTOR *d;
    CHECK(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
    CHECK(VipSendDone(p.a, &d) == VIP_NOT_DONE);
    CHECK(VipDisconnect(p.a) == VIP_INVALID_STATE);
    REQUIRE(vt::drive_to_state(p.b, VIP_STATE_ERROR, vt::kWaitMs));
    REQUIRE(VipDisconnect(p.b) == VIP_SUCCESS);

    // The same two VIs connect again.
    std::string disc = vt::unique_disc("-re");
    vt::Address server(na.nic, disc), client(nb.nic, disc + "c"), target(nb.nic, disc);
    auto cl = std::async(std::launch::async, [&] {
        return vt::connect_request(p.b, client.get(), target.get(), vt::kWaitMs);
    });
    Request r;
    REQUIRE(wait_request(na, server, vt::kWaitMs, r) == VIP_SUCCESS);
    REQUIRE(VipConnectAccept(r.conn, p.a) == VIP_SUCCESS);
    REQUIRE(cl.get() == VIP_SUCCESS);
    check_link(p.b, mb, p.a, ma, "reconnected");
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("VipDisconnect refuses bad handles and Idle VIs", "[connect][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    CHECK(VipDisconnect(nullptr) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles()) CHECK(VipDisconnect(h) == VIP_INVALID_PARAMETER);
    VIP_VI_HANDLE vi = make_vi(n, vt::vi_attrs(n));
    CHECK(VipDisconnect(vi) == VIP_INVALID_STATE);
    REQUIRE(VipDestroyVi(vi) == VIP_SUCCESS);
    CHECK(VipDisconnect(vi) == VIP_INVALID_PARAMETER);
}
