// VipCreateVi, VipDestroyVi, VipQueryVi, VipSetViAttributes and the VI state rules.
#include "support.h"

#include <cstring>

namespace {

// The attribute errors VipCreateVi and VipSetViAttributes share, as
// (attributes, expected return code) pairs built from valid ones.
std::vector<std::pair<VIP_VI_ATTRIBUTES, VIP_RETURN>> bad_attributes(const vt::Nic &n,
                                                                     const vt::Nic &other) {
    std::vector<std::pair<VIP_VI_ATTRIBUTES, VIP_RETURN>> out;
    VIP_VI_ATTRIBUTES good = vt::vi_attrs(n);
    auto add = [&](const std::function<void(VIP_VI_ATTRIBUTES &)> &change, VIP_RETURN rc) {
        VIP_VI_ATTRIBUTES a = good;
        change(a);
        out.emplace_back(a, rc);
    };
    add([](VIP_VI_ATTRIBUTES &a) { a.ReliabilityLevel = 0; }, VIP_INVALID_RELIABILITY_LEVEL);
    add([](VIP_VI_ATTRIBUTES &a) { a.ReliabilityLevel = 0x08; }, VIP_INVALID_RELIABILITY_LEVEL);
    add([](VIP_VI_ATTRIBUTES &a) { a.ReliabilityLevel = 0x8000; }, VIP_INVALID_RELIABILITY_LEVEL);
    add(
        [](VIP_VI_ATTRIBUTES &a) {
            a.ReliabilityLevel = VIP_SERVICE_UNRELIABLE | VIP_SERVICE_RELIABLE_DELIVERY;
        },
        VIP_INVALID_RELIABILITY_LEVEL);
    add([](VIP_VI_ATTRIBUTES &a) { a.MaxTransferSize = 0; }, VIP_INVALID_MTU);
    add([&](VIP_VI_ATTRIBUTES &a) { a.MaxTransferSize = n.attrs.MaxTransferSize + 1; },
        VIP_INVALID_MTU);
    add([](VIP_VI_ATTRIBUTES &a) { a.QoS = reinterpret_cast<VIP_QOS>(0x10); }, VIP_INVALID_QOS);
    add([](VIP_VI_ATTRIBUTES &a) { a.Ptag = nullptr; }, VIP_INVALID_PTAG);
    add([&](VIP_VI_ATTRIBUTES &a) { a.Ptag = other.ptag; }, VIP_INVALID_PTAG);
    for (VIP_PVOID h : vt::garbage_handles(20))
        add([&](VIP_VI_ATTRIBUTES &a) { a.Ptag = h; }, VIP_INVALID_PTAG);
    add(
        [](VIP_VI_ATTRIBUTES &a) {
            a.ReliabilityLevel = VIP_SERVICE_UNRELIABLE;
            a.EnableRdmaRead = VIP_TRUE;
        },
        VIP_INVALID_RDMAREAD);
    return out;
}

void check_same(const VIP_VI_ATTRIBUTES &got, const VIP_VI_ATTRIBUTES &want) {
    CHECK(got.ReliabilityLevel == want.ReliabilityLevel);
    CHECK(got.MaxTransferSize == want.MaxTransferSize);
    CHECK(got.QoS == want.QoS);
    CHECK(got.Ptag == want.Ptag);
    CHECK(got.EnableRdmaWrite == want.EnableRdmaWrite);
    CHECK(got.EnableRdmaRead == want.EnableRdmaRead);
}

} // namespace

TEST_CASE("VipCreateVi makes an Idle VI with the given attributes", "[vi]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n, VIP_SERVICE_RELIABLE_RECEPTION, 4096, true, true);
    VIP_VI_HANDLE vi = nullptr, vi2 = nullptr;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi2) == VIP_SUCCESS);
    CHECK(vi != vi2);
    VIP_VI_STATE st = VIP_STATE_ERROR;
    VIP_VI_ATTRIBUTES got{};
    VIP_BOOLEAN sq = VIP_FALSE, rq = VIP_FALSE;
    REQUIRE(VipQueryVi(vi, &st, &got, &sq, &rq) == VIP_SUCCESS);
    CHECK(st == VIP_STATE_IDLE);
    check_same(got, va);
    CHECK(sq == VIP_TRUE);
    CHECK(rq == VIP_TRUE);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
    CHECK(VipDestroyVi(vi2) == VIP_SUCCESS);
}

TEST_CASE("VipCreateVi refuses bad arguments", "[vi][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device), other(device);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi = reinterpret_cast<VIP_VI_HANDLE>(0x77);
    CHECK(VipCreateVi(nullptr, &va, nullptr, nullptr, &vi) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipCreateVi(h, &va, nullptr, nullptr, &vi) == VIP_INVALID_PARAMETER);
    CHECK(VipCreateVi(n.nic, nullptr, nullptr, nullptr, &vi) == VIP_INVALID_PARAMETER);
    CHECK(VipCreateVi(n.nic, &va, nullptr, nullptr, nullptr) == VIP_INVALID_PARAMETER);

    // CQ handles: garbage, of another NIC, destroyed.
    for (VIP_PVOID h : vt::garbage_handles(50)) {
        CHECK(VipCreateVi(n.nic, &va, h, nullptr, &vi) == VIP_INVALID_PARAMETER);
        CHECK(VipCreateVi(n.nic, &va, nullptr, h, &vi) == VIP_INVALID_PARAMETER);
    }
    VIP_CQ_HANDLE foreign, dead;
    REQUIRE(VipCreateCQ(other.nic, 4, &foreign) == VIP_SUCCESS);
    CHECK(VipCreateVi(n.nic, &va, foreign, nullptr, &vi) == VIP_INVALID_PARAMETER);
    CHECK(VipCreateVi(n.nic, &va, nullptr, foreign, &vi) == VIP_INVALID_PARAMETER);
    REQUIRE(VipCreateCQ(n.nic, 4, &dead) == VIP_SUCCESS);
    REQUIRE(VipDestroyCQ(dead) == VIP_SUCCESS);
    CHECK(VipCreateVi(n.nic, &va, dead, nullptr, &vi) == VIP_INVALID_PARAMETER);

    VIP_PROTECTION_HANDLE gone;
    REQUIRE(VipCreatePtag(n.nic, &gone) == VIP_SUCCESS);
    REQUIRE(VipDestroyPtag(n.nic, gone) == VIP_SUCCESS);
    auto cases = bad_attributes(n, other);
    VIP_VI_ATTRIBUTES dead_tag = va;
    dead_tag.Ptag = gone;
    cases.emplace_back(dead_tag, VIP_INVALID_PTAG);
    for (auto &[attrs, rc] : cases) {
        INFO("level " << attrs.ReliabilityLevel << " mtu " << attrs.MaxTransferSize << " ptag "
                      << attrs.Ptag << " qos " << attrs.QoS);
        CHECK(VipCreateVi(n.nic, &attrs, nullptr, nullptr, &vi) == rc);
    }
    CHECK(vi == reinterpret_cast<VIP_VI_HANDLE>(0x77));
}

TEST_CASE("VipDestroyVi refuses bad handles", "[vi][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    CHECK(VipDestroyVi(nullptr) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles()) CHECK(VipDestroyVi(h) == VIP_INVALID_PARAMETER);
    CHECK(VipDestroyVi(n.nic) == VIP_INVALID_PARAMETER);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    REQUIRE(VipDestroyVi(vi) == VIP_SUCCESS);
    CHECK(VipDestroyVi(vi) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryVi(vi, nullptr, nullptr, nullptr, nullptr) == VIP_INVALID_PARAMETER);
    // A new VI does not revive the old handle.
    VIP_VI_HANDLE again;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &again) == VIP_SUCCESS);
    CHECK(VipDestroyVi(vi) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryVi(again, nullptr, nullptr, nullptr, nullptr) == VIP_SUCCESS);
    CHECK(VipDestroyVi(again) == VIP_SUCCESS);
}

TEST_CASE("VipDestroyVi refuses a VI with queued descriptors until they are taken", "[vi]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 4096), mb(nb, 4096);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(na);
    VIP_VI_HANDLE idle;
    REQUIRE(VipCreateVi(na.nic, &va, nullptr, nullptr, &idle) == VIP_SUCCESS);
    vt::set_desc(ma.desc(4), nullptr, 0, ma.mh);
    REQUIRE(VipPostRecv(idle, ma.desc(4), ma.mh) == VIP_SUCCESS);
    CHECK(VipDestroyVi(idle) == VIP_INVALID_STATE);

    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, nullptr,
                                  nullptr, nullptr, [&](VIP_VI_HANDLE a, VIP_VI_HANDLE) {
                                      vt::set_desc(ma.desc(0), ma.base + 1024, 64, ma.mh);
                                      REQUIRE(VipPostRecv(a, ma.desc(0), ma.mh) == VIP_SUCCESS);
                                  });
    // Connected: refused whatever the queues hold.
    CHECK(VipDestroyVi(p.a) == VIP_INVALID_STATE);
    CHECK(VipDestroyVi(p.b) == VIP_INVALID_STATE);
    REQUIRE(VipDisconnect(p.a) == VIP_SUCCESS);
    // Idle again, but the flushed receive has not been taken yet.
    CHECK(vt::vi_state(p.a) == VIP_STATE_IDLE);
    CHECK(VipDestroyVi(p.a) == VIP_INVALID_STATE);
    VIP_DESCRIPTOR *d = nullptr;
    REQUIRE(VipRecvDone(p.a, &d) == VIP_DESCRIPTOR_ERROR);
    CHECK(d == ma.desc(0));
    CHECK((d->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR) != 0);
    CHECK(VipDestroyVi(p.a) == VIP_SUCCESS);

    // The peer was sent to the Error state: still not destroyable.
    REQUIRE(vt::drive_to_state(p.b, VIP_STATE_ERROR, vt::kWaitMs));
    CHECK(VipDestroyVi(p.b) == VIP_INVALID_STATE);
    REQUIRE(VipDisconnect(p.b) == VIP_SUCCESS);
    CHECK(VipDestroyVi(p.b) == VIP_SUCCESS);
    na.close();
}

TEST_CASE("VipQueryVi follows the VI through its states", "[vi]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 4096);
    VIP_VI_ATTRIBUTES attrs_a = vt::vi_attrs(na, VIP_SERVICE_RELIABLE_DELIVERY, 8192, true, false);
    vt::Pair p =
        vt::connect_pair(na, nb, attrs_a, vt::vi_attrs(nb, VIP_SERVICE_RELIABLE_DELIVERY, 8192));
    VIP_VI_STATE st = VIP_STATE_IDLE;
    VIP_VI_ATTRIBUTES got{};
    VIP_BOOLEAN sq = VIP_FALSE, rq = VIP_FALSE;
    REQUIRE(VipQueryVi(p.a, &st, &got, &sq, &rq) == VIP_SUCCESS);
    CHECK(st == VIP_STATE_CONNECTED);
    check_same(got, attrs_a);
    CHECK(sq == VIP_TRUE);
    CHECK(rq == VIP_TRUE);

    vt::set_desc(ma.desc(0), ma.base + 1024, 64, ma.mh);
    REQUIRE(VipPostRecv(p.a, ma.desc(0), ma.mh) == VIP_SUCCESS);
    REQUIRE(VipQueryVi(p.a, nullptr, nullptr, &sq, &rq) == VIP_SUCCESS);
    CHECK(sq == VIP_TRUE);
    CHECK(rq == VIP_FALSE);
    // Every output is optional.
    CHECK(VipQueryVi(p.a, nullptr, nullptr, nullptr, nullptr) == VIP_SUCCESS);

    REQUIRE(VipDisconnect(p.b) == VIP_SUCCESS);
    CHECK(vt::vi_state(p.b) == VIP_STATE_IDLE);
    std::vector<vt::Taken> taken;
    REQUIRE(vt::drive_to_state(p.a, VIP_STATE_ERROR, vt::kWaitMs, &taken));
    vt::drive_until(
        p.a, [&] { return !taken.empty(); }, vt::kWaitMs, &taken);
    REQUIRE(taken.size() == 1);
    CHECK(taken[0].desc == ma.desc(0));
    CHECK(taken[0].rc == VIP_DESCRIPTOR_ERROR);
    CHECK((taken[0].desc->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR) != 0);
    REQUIRE(VipQueryVi(p.a, &st, nullptr, &sq, &rq) == VIP_SUCCESS);
    CHECK(st == VIP_STATE_ERROR);
    CHECK(rq == VIP_TRUE);
    REQUIRE(VipDisconnect(p.a) == VIP_SUCCESS);
    CHECK(vt::vi_state(p.a) == VIP_STATE_IDLE);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("VipQueryVi refuses bad handles", "[vi][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_VI_STATE st = VIP_STATE_ERROR;
    VIP_VI_ATTRIBUTES a;
    VIP_BOOLEAN sq, rq;
    CHECK(VipQueryVi(nullptr, &st, &a, &sq, &rq) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles())
        CHECK(VipQueryVi(h, &st, &a, &sq, &rq) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryVi(n.nic, &st, &a, &sq, &rq) == VIP_INVALID_PARAMETER);
    CHECK(st == VIP_STATE_ERROR);
}

TEST_CASE("VipSetViAttributes changes an Idle VI", "[vi]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(na);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(na.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    VIP_PROTECTION_HANDLE p2;
    REQUIRE(VipCreatePtag(na.nic, &p2) == VIP_SUCCESS);
    VIP_VI_ATTRIBUTES changed = vt::vi_attrs(na, VIP_SERVICE_RELIABLE_RECEPTION, 12288, true, true);
    changed.Ptag = p2;
    REQUIRE(VipSetViAttributes(vi, &changed) == VIP_SUCCESS);
    VIP_VI_ATTRIBUTES got{};
    REQUIRE(VipQueryVi(vi, nullptr, &got, nullptr, nullptr) == VIP_SUCCESS);
    check_same(got, changed);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);

    // A VI connects with the attributes it was changed to: the peer's MTU
    // and level match only the changed ones.
    VIP_VI_ATTRIBUTES peer = vt::vi_attrs(nb, VIP_SERVICE_RELIABLE_RECEPTION, 12288);
    vt::Pair p = vt::connect_pair(na, nb, va, peer, nullptr, nullptr, nullptr, nullptr,
                                  [&](VIP_VI_HANDLE a, VIP_VI_HANDLE) {
                                      VIP_VI_ATTRIBUTES c = changed;
                                      c.Ptag = na.ptag;
                                      REQUIRE(VipSetViAttributes(a, &c) == VIP_SUCCESS);
                                  });
    REQUIRE(VipQueryVi(p.a, nullptr, &got, nullptr, nullptr) == VIP_SUCCESS);
    CHECK(got.ReliabilityLevel == VIP_SERVICE_RELIABLE_RECEPTION);
    CHECK(got.MaxTransferSize == 12288);
    // Not Idle: refused, attributes unchanged.
    VIP_VI_ATTRIBUTES again = vt::vi_attrs(na, VIP_SERVICE_RELIABLE_RECEPTION, 12288);
    CHECK(VipSetViAttributes(p.a, &again) == VIP_INVALID_STATE);
    REQUIRE(VipDisconnect(p.b) == VIP_SUCCESS);
    REQUIRE(vt::drive_to_state(p.a, VIP_STATE_ERROR, vt::kWaitMs));
    CHECK(VipSetViAttributes(p.a, &again) == VIP_INVALID_STATE);
    REQUIRE(VipDisconnect(p.a) == VIP_SUCCESS);
    CHECK(VipSetViAttributes(p.a, &again) == VIP_SUCCESS);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("VipSetViAttributes refuses what VipCreateVi refuses", "[vi][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device), other(device);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n, VIP_SERVICE_RELIABLE_DELIVERY, 4096, true, false);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    for (auto &[attrs, rc] : bad_attributes(n, other)) {
        INFO("level " << attrs.ReliabilityLevel << " mtu " << attrs.MaxTransferSize << " ptag "
                      << attrs.Ptag << " qos " << attrs.QoS);
        CHECK(VipSetViAttributes(vi, &attrs) == rc);
    }
    CHECK(VipSetViAttributes(vi, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipSetViAttributes(nullptr, &va) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipSetViAttributes(h, &va) == VIP_INVALID_PARAMETER);
    VIP_VI_ATTRIBUTES got{};
    REQUIRE(VipQueryVi(vi, nullptr, &got, nullptr, nullptr) == VIP_SUCCESS);
    check_same(got, va);
    REQUIRE(VipDestroyVi(vi) == VIP_SUCCESS);
    CHECK(VipSetViAttributes(vi, &va) == VIP_INVALID_PARAMETER);
}

TEST_CASE("A VI with a peer connection pending is neither Idle nor destroyable", "[vi]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    std::string disc = vt::unique_disc("-pend");
    vt::Address local(n.nic, disc + "a"), remote(n.nic, disc + "b");
    REQUIRE(VipConnectPeerRequest(vi, local.get(), remote.get(), vt::kWaitMs) == VIP_SUCCESS);
    CHECK(vt::vi_state(vi) == VIP_STATE_CONNECT_PENDING);
    CHECK(VipDestroyVi(vi) == VIP_INVALID_STATE);
    CHECK(VipSetViAttributes(vi, &va) == VIP_INVALID_STATE);
    // Receives may be posted while pending.
    vt::Memory m(n, 4096);
    vt::set_desc(m.desc(0), m.base + 1024, 64, m.mh);
    CHECK(VipPostRecv(vi, m.desc(0), m.mh) == VIP_SUCCESS);
    // Sends may not.
    vt::set_desc(m.desc(1), m.base + 2048, 64, m.mh);
    CHECK(VipPostSend(vi, m.desc(1), m.mh) == VIP_INVALID_STATE);
    REQUIRE(VipDisconnect(vi) == VIP_SUCCESS);
    CHECK(vt::vi_state(vi) == VIP_STATE_IDLE);
    VIP_DESCRIPTOR *d;
    REQUIRE(VipRecvDone(vi, &d) == VIP_DESCRIPTOR_ERROR);
    CHECK((d->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR) != 0);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
}
