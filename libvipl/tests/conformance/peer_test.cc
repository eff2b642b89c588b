// Peer-to-peer connections: VipConnectPeerRequest, VipConnectPeerDone, VipConnectPeerWait.
#include "support.h"

#include <chrono>
#include <cstring>
#include <future>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

VIP_VI_HANDLE make_vi(const vt::Nic &n, const VIP_VI_ATTRIBUTES &attrs) {
    VIP_VI_ATTRIBUTES a = attrs;
    VIP_VI_HANDLE vi = nullptr;
    REQUIRE(VipCreateVi(n.nic, &a, nullptr, nullptr, &vi) == VIP_SUCCESS);
    return vi;
}

struct PeerResult {
    VIP_RETURN request = VIP_NOT_DONE;
    VIP_RETURN wait = VIP_NOT_DONE;
    VIP_VI_ATTRIBUTES remote{};
};

// One side of a peer connection, as a thread would run it.
PeerResult peer_side(VIP_VI_HANDLE vi, vt::Address &local, vt::Address &remote, VIP_ULONG timeout) {
    PeerResult r;
    r.request = VipConnectPeerRequest(vi, local.get(), remote.get(), timeout);
    if (r.request == VIP_SUCCESS) r.wait = VipConnectPeerWait(vi, &r.remote);
    return r;
}

void exchange(VIP_VI_HANDLE from, vt::Memory &mf, VIP_VI_HANDLE to, vt::Memory &mt, uint32_t seed) {
    vt::set_desc(mt.desc(0), mt.base + 2048, 1024, mt.mh);
    REQUIRE(VipPostRecv(to, mt.desc(0), mt.mh) == VIP_SUCCESS);
    vt::fill_pattern(mf.base + 2048, 1000, seed);
    vt::set_desc(mf.desc(0), mf.base + 2048, 1000, mf.mh);
    REQUIRE(VipPostSend(from, mf.desc(0), mf.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d = nullptr;
    REQUIRE(VipRecvWait(to, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d->CS.Length == 1000);
    CHECK(vt::check_pattern(mt.base + 2048, 1000, seed));
    REQUIRE(VipSendWait(from, vt::kWaitMs, &d) == VIP_SUCCESS);
}

} // namespace

TEST_CASE("Two peers connect with mirror requests made from two threads", "[peer]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    std::string disc = vt::unique_disc("-p2p");
    vt::Address a_addr(na.nic, disc + "a"), b_addr(na.nic, disc + "b");
    vt::Address a_from_b(nb.nic, disc + "a"), b_from_b(nb.nic, disc + "b");
    VIP_VI_ATTRIBUTES aa = vt::vi_attrs(na, VIP_SERVICE_RELIABLE_DELIVERY, 32768, true, false);
    VIP_VI_ATTRIBUTES ab = vt::vi_attrs(nb, VIP_SERVICE_RELIABLE_DELIVERY, 32768, false, true);
    VIP_VI_HANDLE va = make_vi(na, aa), vb = make_vi(nb, ab);
    auto ta =
        std::async(std::launch::async, [&] { return peer_side(va, a_addr, b_addr, vt::kWaitMs); });
    auto tb = std::async(std::launch::async,
                         [&] { return peer_side(vb, b_from_b, a_from_b, vt::kWaitMs); });
    PeerResult ra = ta.get(), rb = tb.get();
    REQUIRE(ra.request == VIP_SUCCESS);
    REQUIRE(rb.request == VIP_SUCCESS);
    REQUIRE(ra.wait == VIP_SUCCESS);
    REQUIRE(rb.wait == VIP_SUCCESS);
    CHECK(ra.remote.ReliabilityLevel == VIP_SERVICE_RELIABLE_DELIVERY);
    CHECK(ra.remote.MaxTransferSize == 32768);
    CHECK(ra.remote.EnableRdmaWrite == VIP_FALSE);
    CHECK(ra.remote.EnableRdmaRead == VIP_TRUE);
    CHECK(rb.remote.EnableRdmaWrite == VIP_TRUE);
    CHECK(rb.remote.EnableRdmaRead == VIP_FALSE);
    CHECK(vt::vi_state(va) == VIP_STATE_CONNECTED);
    CHECK(vt::vi_state(vb) == VIP_STATE_CONNECTED);
    vt::Memory ma(na, 8192), mb(nb, 8192);
    exchange(va, ma, vb, mb, 1);
    exchange(vb, mb, va, ma, 2);
    vt::destroy_vi(va);
    vt::destroy_vi(vb);
}

TEST_CASE("VipConnectPeerDone polls until the mirror request arrives", "[peer]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    std::string disc = vt::unique_disc("-poll");
    // Either side may be first; each order runs once.
    for (bool a_first : {true, false}) {
        std::string d = disc + (a_first ? "1" : "2");
        vt::Address a_addr(na.nic, d + "a"), b_addr(na.nic, d + "b");
        vt::Address a_from_b(nb.nic, d + "a"), b_from_b(nb.nic, d + "b");
        VIP_VI_HANDLE va = make_vi(na, vt::vi_attrs(na)), vb = make_vi(nb, vt::vi_attrs(nb));
        VIP_VI_HANDLE first = a_first ? va : vb;
        vt::Address &fl = a_first ? a_addr : b_from_b, &fr = a_first ? b_addr : a_from_b;
        REQUIRE(VipConnectPeerRequest(first, fl.get(), fr.get(), 8000) == VIP_SUCCESS);
        VIP_VI_ATTRIBUTES ra;
        CHECK(VipConnectPeerDone(first, &ra) == VIP_NOT_DONE);
        CHECK(vt::vi_state(first) == VIP_STATE_CONNECT_PENDING);
        // The second side starts later, on another thread.
        VIP_VI_HANDLE second = a_first ? vb : va;
        vt::Address &sl = a_first ? b_from_b : a_addr, &sr = a_first ? a_from_b : b_addr;
        auto t = std::async(std::launch::async, [&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            return peer_side(second, sl, sr, 8000);
        });
        VIP_RETURN rc = VIP_NOT_DONE;
        auto end = Clock::now() + std::chrono::seconds(8);
        while (rc == VIP_NOT_DONE && Clock::now() < end) {
            rc = VipConnectPeerDone(first, &ra);
            if (rc == VIP_NOT_DONE) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        CHECK(rc == VIP_SUCCESS);
        PeerResult r2 = t.get();
        CHECK(r2.request == VIP_SUCCESS);
        CHECK(r2.wait == VIP_SUCCESS);
        CHECK(vt::vi_state(va) == VIP_STATE_CONNECTED);
        CHECK(vt::vi_state(vb) == VIP_STATE_CONNECTED);
        vt::destroy_vi(va);
        vt::destroy_vi(vb);
    }
}

TEST_CASE("A peer request without a mirror times out", "[peer]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    std::string disc = vt::unique_disc("-alone");
    for (bool larger : {true, false}) {
        // Both orders of discriminators, so both roles an implementation may pick are covered.
        vt::Address local(n.nic, disc + (larger ? "z" : "a")), remote(n.nic, disc + "m");
        VIP_VI_HANDLE vi = make_vi(n, vt::vi_attrs(n));
        auto start = Clock::now();
        REQUIRE(VipConnectPeerRequest(vi, local.get(), remote.get(), 200) == VIP_SUCCESS);
        VIP_VI_ATTRIBUTES ra;
        CHECK(VipConnectPeerWait(vi, &ra) == VIP_TIMEOUT);
        CHECK(Clock::now() - start < std::chrono::seconds(5));
        CHECK(vt::vi_state(vi) == VIP_STATE_IDLE);
        CHECK(VipConnectPeerDone(vi, &ra) == VIP_INVALID_STATE);
        CHECK(VipDestroyVi(vi) == VIP_SUCCESS);

        // Polling sees the same timeout.
        vi = make_vi(n, vt::vi_attrs(n));
        REQUIRE(VipConnectPeerRequest(vi, local.get(), remote.get(), 100) == VIP_SUCCESS);
        VIP_RETURN rc = VIP_NOT_DONE;
        auto end = Clock::now() + std::chrono::seconds(5);
        while (rc == VIP_NOT_DONE && Clock::now() < end) {
            rc = VipConnectPeerDone(vi, &ra);
            if (rc == VIP_NOT_DONE) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        CHECK(rc == VIP_TIMEOUT);
        CHECK(vt::vi_state(vi) == VIP_STATE_IDLE);
        CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
    }
}

TEST_CASE("A peer connects only with the peer it names", "[peer]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    std::string disc = vt::unique_disc("-who");
    vt::Address a(n.nic, disc + "a"), b(n.nic, disc + "b"), c(n.nic, disc + "c");
    VIP_VI_HANDLE va = make_vi(n, vt::vi_attrs(n)), vb = make_vi(n, vt::vi_attrs(n)),
                  vc = make_vi(n, vt::vi_attrs(n));
    // c asks for a, but a asks for b.
    auto tc = std::async(std::launch::async, [&] { return peer_side(vc, c, a, 600); });
    auto ta = std::async(std::launch::async, [&] { return peer_side(va, a, b, vt::kWaitMs); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto tb = std::async(std::launch::async, [&] { return peer_side(vb, b, a, vt::kWaitMs); });
    PeerResult rc = tc.get(), ra = ta.get(), rb = tb.get();
    CHECK(ra.wait == VIP_SUCCESS);
    CHECK(rb.wait == VIP_SUCCESS);
    CHECK(rc.request == VIP_SUCCESS);
    CHECK(rc.wait == VIP_TIMEOUT);
    CHECK(vt::vi_state(vc) == VIP_STATE_IDLE);
    vt::Memory ma(n, 8192), mb(n, 8192);
    exchange(va, ma, vb, mb, 3);
    for (VIP_VI_HANDLE v : {va, vb, vc}) vt::destroy_vi(v);
}

TEST_CASE("Peers with mismatched attributes are told why", "[peer]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    struct Case {
        VIP_VI_ATTRIBUTES a, b;
        VIP_RETURN rc;
    };
    std::vector<Case> cases = {
        {vt::vi_attrs(na, VIP_SERVICE_RELIABLE_DELIVERY, 8192),
         vt::vi_attrs(nb, VIP_SERVICE_UNRELIABLE, 8192), VIP_INVALID_RELIABILITY_LEVEL},
        {vt::vi_attrs(na, VIP_SERVICE_RELIABLE_DELIVERY, 8192),
         vt::vi_attrs(nb, VIP_SERVICE_RELIABLE_DELIVERY, 4096), VIP_INVALID_MTU},
    };
    int i = 0;
    for (auto &k : cases) {
        std::string disc = vt::unique_disc("-mm") + std::to_string(i++);
        vt::Address a_addr(na.nic, disc + "a"), b_addr(na.nic, disc + "b");
        vt::Address a_from_b(nb.nic, disc + "a"), b_from_b(nb.nic, disc + "b");
        VIP_VI_HANDLE va = make_vi(na, k.a), vb = make_vi(nb, k.b);
        auto ta =
            std::async(std::launch::async, [&] { return peer_side(va, a_addr, b_addr, 3000); });
        auto tb =
            std::async(std::launch::async, [&] { return peer_side(vb, b_from_b, a_from_b, 3000); });
        PeerResult ra = ta.get(), rb = tb.get();
        INFO("expected " << VipReturnString(k.rc));
        CHECK(ra.wait == k.rc);
        CHECK(rb.wait == k.rc);
        CHECK(vt::vi_state(va) == VIP_STATE_IDLE);
        CHECK(vt::vi_state(vb) == VIP_STATE_IDLE);
        CHECK(VipDestroyVi(va) == VIP_SUCCESS);
        CHECK(VipDestroyVi(vb) == VIP_SUCCESS);
    }
}

TEST_CASE("VipConnectPeerRequest checks its arguments and the VI's state", "[peer][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    std::string disc = vt::unique_disc("-pargs");
    vt::Address local(na.nic, disc + "a"), remote(na.nic, disc + "b");
    VIP_VI_HANDLE vi = make_vi(na, vt::vi_attrs(na));
    CHECK(VipConnectPeerRequest(nullptr, local.get(), remote.get(), 100) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipConnectPeerRequest(h, local.get(), remote.get(), 100) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectPeerRequest(vi, nullptr, remote.get(), 100) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectPeerRequest(vi, local.get(), nullptr, 100) == VIP_INVALID_PARAMETER);
    CHECK(vt::vi_state(vi) == VIP_STATE_IDLE);

    vt::Address far(na.nic, disc + "b");
    for (int i = 0; i < far.get()->HostAddressLen; ++i) far.get()->HostAddress[i] ^= 0x5a;
    CHECK(VipConnectPeerRequest(vi, local.get(), far.get(), 100) == VIP_NOT_REACHABLE);
    CHECK(vt::vi_state(vi) == VIP_STATE_IDLE);

    // Not Idle: a request already pending, or connected.
    REQUIRE(VipConnectPeerRequest(vi, local.get(), remote.get(), vt::kWaitMs) == VIP_SUCCESS);
    CHECK(VipConnectPeerRequest(vi, local.get(), remote.get(), vt::kWaitMs) == VIP_INVALID_STATE);
    REQUIRE(VipDisconnect(vi) == VIP_SUCCESS);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    CHECK(VipConnectPeerRequest(p.a, local.get(), remote.get(), 100) == VIP_INVALID_STATE);
    CHECK(vt::vi_state(p.a) == VIP_STATE_CONNECTED);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("VipConnectPeerDone and VipConnectPeerWait check their arguments", "[peer][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_VI_HANDLE vi = make_vi(n, vt::vi_attrs(n));
    VIP_VI_ATTRIBUTES ra;
    // No request pending.
    CHECK(VipConnectPeerDone(vi, &ra) == VIP_INVALID_STATE);
    CHECK(VipConnectPeerWait(vi, &ra) == VIP_INVALID_STATE);
    CHECK(VipConnectPeerDone(nullptr, &ra) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectPeerWait(nullptr, &ra) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50)) {
        CHECK(VipConnectPeerDone(h, &ra) == VIP_INVALID_PARAMETER);
        CHECK(VipConnectPeerWait(h, &ra) == VIP_INVALID_PARAMETER);
    }
    std::string disc = vt::unique_disc("-dargs");
    vt::Address local(n.nic, disc + "a"), remote(n.nic, disc + "b");
    REQUIRE(VipConnectPeerRequest(vi, local.get(), remote.get(), vt::kWaitMs) == VIP_SUCCESS);
    CHECK(VipConnectPeerDone(vi, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectPeerWait(vi, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(vt::vi_state(vi) == VIP_STATE_CONNECT_PENDING);
    REQUIRE(VipDisconnect(vi) == VIP_SUCCESS);
    CHECK(VipConnectPeerDone(vi, &ra) == VIP_INVALID_STATE);
    REQUIRE(VipDestroyVi(vi) == VIP_SUCCESS);
    CHECK(VipConnectPeerDone(vi, &ra) == VIP_INVALID_PARAMETER);
}
