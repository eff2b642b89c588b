// Asynchronous errors (VipErrorCallback, VIP_ERROR_DESCRIPTOR), a peer that
// disconnects or dies, and handles that must be refused everywhere.
#include "support.h"

#include <chrono>
#include <csignal>
#include <cstring>
#include <future>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace {

using Clock = std::chrono::steady_clock;

void check_conn_lost(const VIP_ERROR_DESCRIPTOR &e, VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi) {
    CHECK(e.NicHandle == nic);
    CHECK(e.ViHandle == vi);
    CHECK(e.ResourceCode == VIP_RESOURCE_VI);
    CHECK(e.ErrorCode == VIP_ERROR_CONN_LOST);
}

} // namespace

TEST_CASE("VipErrorCallback checks its arguments", "[errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    vt::ErrorLog log;
    CHECK(VipErrorCallback(nullptr, &log, &vt::ErrorLog::handler) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles())
        CHECK(VipErrorCallback(h, &log, &vt::ErrorLog::handler) == VIP_INVALID_PARAMETER);
    CHECK(VipErrorCallback(n.ptag, &log, &vt::ErrorLog::handler) == VIP_INVALID_PARAMETER);
    CHECK(VipErrorCallback(n.nic, &log, &vt::ErrorLog::handler) == VIP_SUCCESS);
    // NULL restores the default handler.
    CHECK(VipErrorCallback(n.nic, nullptr, nullptr) == VIP_SUCCESS);
    VIP_NIC_HANDLE closed;
    REQUIRE(VipOpenNic(device.c_str(), &closed) == VIP_SUCCESS);
    REQUIRE(VipCloseNic(closed) == VIP_SUCCESS);
    CHECK(VipErrorCallback(closed, &log, &vt::ErrorLog::handler) == VIP_INVALID_PARAMETER);
}

TEST_CASE("A peer that disconnects raises VIP_ERROR_CONN_LOST", "[errors]") {
    std::string device = VT_DEVICE();
    vt::ErrorLog log, peer_log;
    vt::Nic na(device), nb(device);
    log.install(na.nic);
    peer_log.install(nb.nic);
    vt::Memory ma(na, 8192);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, nullptr,
                                  nullptr, nullptr, [&](VIP_VI_HANDLE a, VIP_VI_HANDLE) {
                                      vt::set_desc(ma.desc(0), ma.base + 4096, 64, ma.mh);
                                      REQUIRE(VipPostRecv(a, ma.desc(0), ma.mh) == VIP_SUCCESS);
                                  });
    REQUIRE(VipDisconnect(p.b) == VIP_SUCCESS);
    // Reported without the program calling anything on the VI.
    VIP_ERROR_DESCRIPTOR e{};
    REQUIRE(log.wait_for(VIP_ERROR_CONN_LOST, p.a, vt::kWaitMs, &e));
    check_conn_lost(e, na.nic, p.a);
    std::vector<vt::Taken> taken;
    CHECK(vt::drive_to_state(p.a, VIP_STATE_ERROR, vt::kWaitMs, &taken));
    vt::drive_until(
        p.a, [&] { return !taken.empty(); }, 2000, &taken);
    REQUIRE(taken.size() == 1);
    CHECK(taken[0].desc == ma.desc(0));
    CHECK((ma.desc(0)->CS.Status & VIP_STATUS_ERROR_MASK) == VIP_STATUS_DESC_FLUSHED_ERROR);
    // The side that disconnected gets no error of its own.
    CHECK(peer_log.all().empty());
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("Error callbacks can be replaced and removed", "[errors]") {
    std::string device = VT_DEVICE();
    vt::ErrorLog first, second;
    vt::Nic na(device), nb(device);
    first.install(na.nic);
    second.install(na.nic);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    REQUIRE(VipDisconnect(p.b) == VIP_SUCCESS);
    CHECK(second.wait_for(VIP_ERROR_CONN_LOST, p.a, vt::kWaitMs));
    CHECK(first.all().empty());

    // Back to the default handler: nothing reaches the old one.
    REQUIRE(VipErrorCallback(na.nic, nullptr, nullptr) == VIP_SUCCESS);
    vt::Pair q = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    REQUIRE(VipDisconnect(q.b) == VIP_SUCCESS);
    CHECK(vt::drive_to_state(q.a, VIP_STATE_ERROR, vt::kWaitMs));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(second.all().size() == 1);
    CHECK(first.all().empty());
    for (VIP_VI_HANDLE v : {p.a, p.b, q.a, q.b}) vt::destroy_vi(v);
}

namespace {

enum class Death { exits, killed, closes_nic };

// A child process connects to us, then goes away as `how` says.
void peer_process_goes(Death how, bool child_is_server) {
    std::string device = VT_DEVICE();
    std::string disc = vt::unique_disc(child_is_server ? "-csrv" : "-ccli");
    vt::Pipe up, down;
    int pid = vt::spawn_child([&]() -> int {
        VIP_NIC_HANDLE nic;
        if (VipOpenNic(device.c_str(), &nic) != VIP_SUCCESS) return 1;
        VIP_NIC_ATTRIBUTES attrs;
        VIP_PROTECTION_HANDLE ptag;
        if (VipQueryNic(nic, &attrs) != VIP_SUCCESS || VipCreatePtag(nic, &ptag) != VIP_SUCCESS)
            return 2;
        VIP_VI_ATTRIBUTES va{};
        va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
        va.MaxTransferSize = attrs.MaxTransferSize;
        va.Ptag = ptag;
        VIP_VI_HANDLE vi;
        if (VipCreateVi(nic, &va, nullptr, nullptr, &vi) != VIP_SUCCESS) return 3;
        VIP_RETURN rc;
        if (child_is_server) {
            vt::Address local(nic, disc);
            vt::AddressBuffer remote;
            VIP_VI_ATTRIBUTES ra;
            VIP_CONN_HANDLE conn;
            up.put('l'); // listening from now on
            rc = VipConnectWait(nic, local.get(), 10000, remote.get(), &ra, &conn);
            if (rc == VIP_SUCCESS) rc = VipConnectAccept(conn, vi);
        } else {
            vt::Address local(nic, disc + "c"), remote(nic, disc);
            rc = vt::connect_request(vi, local.get(), remote.get(), 10000);
        }
        if (rc != VIP_SUCCESS) return 4;
        up.put('c');
        char c;
        if (!down.get(&c, 20000)) return 5;
        if (how == Death::closes_nic) {
            VipCloseNic(nic);
            down.get(&c, 20000);
        }
        _exit(0); // without any cleanup
    });
    vt::ErrorLog log;
    vt::Nic n(device);
    log.install(n.nic);
    vt::Memory m(n, 8192);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    vt::set_desc(m.desc(0), m.base + 4096, 64, m.mh);
    REQUIRE(VipPostRecv(vi, m.desc(0), m.mh) == VIP_SUCCESS);
    char c = 0;
    if (child_is_server) {
        REQUIRE(up.get(&c, 10000));
        vt::Address local(n.nic, disc + "c"), remote(n.nic, disc);
        REQUIRE(vt::connect_request(vi, local.get(), remote.get(), 10000) == VIP_SUCCESS);
    } else {
        vt::Address local(n.nic, disc);
        vt::AddressBuffer remote;
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        REQUIRE(VipConnectWait(n.nic, local.get(), 10000, remote.get(), &ra, &conn) == VIP_SUCCESS);
        REQUIRE(VipConnectAccept(conn, vi) == VIP_SUCCESS);
    }
    REQUIRE(up.get(&c, 10000));
    REQUIRE(c == 'c');
    CHECK(vt::vi_state(vi) == VIP_STATE_CONNECTED);

    // A thread sleeps in RecvWait when the peer goes: it must not hang.
    auto waiter = std::async(std::launch::async, [&] {
        VIP_DESCRIPTOR *d = nullptr;
        VIP_RETURN rc = VipRecvWait(vi, vt::kWaitMs, &d);
        return std::make_pair(rc, d);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto start = Clock::now();
    if (how == Death::killed) kill(pid, SIGKILL);
    down.put('g');
    VIP_ERROR_DESCRIPTOR e{};
    CHECK(log.wait_for(VIP_ERROR_CONN_LOST, vi, vt::kWaitMs, &e));
    check_conn_lost(e, n.nic, vi);
    auto [rc, d] = waiter.get();
    CHECK(Clock::now() - start < std::chrono::seconds(5));
    CHECK(rc == VIP_DESCRIPTOR_ERROR);
    CHECK(d == m.desc(0));
    CHECK((m.desc(0)->CS.Status & VIP_STATUS_ERROR_MASK) == VIP_STATUS_DESC_FLUSHED_ERROR);
    CHECK(vt::vi_state(vi) == VIP_STATE_ERROR);
    down.put('q');
    int status = vt::wait_child(pid, 10);
    if (how == Death::killed) {
        CHECK(WIFSIGNALED(status));
    } else {
        INFO(vt::status_text(status));
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
    }
    REQUIRE(VipDisconnect(vi) == VIP_SUCCESS);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
}

} // namespace

TEST_CASE("A peer process that exits raises VIP_ERROR_CONN_LOST", "[errors][process]") {
    SECTION("child is the client") {
        peer_process_goes(Death::exits, false);
    }
    SECTION("child is the server") {
        peer_process_goes(Death::exits, true);
    }
}

TEST_CASE("A peer process that is killed raises VIP_ERROR_CONN_LOST", "[errors][process]") {
    SECTION("child is the client") {
        peer_process_goes(Death::killed, false);
    }
    SECTION("child is the server") {
        peer_process_goes(Death::killed, true);
    }
}

TEST_CASE("A peer process that closes its NIC raises VIP_ERROR_CONN_LOST", "[errors][process]") {
    peer_process_goes(Death::closes_nic, false);
}

TEST_CASE("Handles do not survive fork", "[errors][process]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    vt::Memory m(n, 4096);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(n.nic, 4, &cq) == VIP_SUCCESS);
    int status = vt::run_child([&]() -> int {
        VIP_NIC_ATTRIBUTES attrs;
        if (VipQueryNic(n.nic, &attrs) != VIP_INVALID_PARAMETER) return 1;
        if (VipQueryVi(vi, nullptr, nullptr, nullptr, nullptr) != VIP_INVALID_PARAMETER) return 2;
        VIP_VI_HANDLE v;
        VIP_BOOLEAN r;
        if (VipCQDone(cq, &v, &r) != VIP_INVALID_PARAMETER) return 3;
        VIP_PROTECTION_HANDLE p;
        if (VipCreatePtag(n.nic, &p) != VIP_INVALID_PARAMETER) return 4;
        vt::set_desc(m.desc(0), nullptr, 0, m.mh);
        if (VipPostRecv(vi, m.desc(0), m.mh) != VIP_INVALID_PARAMETER) return 5;
        // The child can open its own NIC.
        VIP_NIC_HANDLE mine;
        if (VipOpenNic(device.c_str(), &mine) != VIP_SUCCESS) return 6;
        return VipCloseNic(mine) == VIP_SUCCESS ? 0 : 7;
    });
    INFO(vt::status_text(status));
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    // Nothing the child did affected the parent's objects.
    VIP_BOOLEAN rq = VIP_FALSE;
    CHECK(VipQueryVi(vi, nullptr, nullptr, nullptr, &rq) == VIP_SUCCESS);
    CHECK(rq == VIP_TRUE);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
    CHECK(VipDestroyCQ(cq) == VIP_SUCCESS);
}

TEST_CASE("Every function refuses handles of destroyed objects", "[errors]") {
    std::string device = VT_DEVICE();
    VIP_NIC_HANDLE nic;
    REQUIRE(VipOpenNic(device.c_str(), &nic) == VIP_SUCCESS);
    VIP_PROTECTION_HANDLE ptag;
    REQUIRE(VipCreatePtag(nic, &ptag) == VIP_SUCCESS);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(nic, 4, &cq) == VIP_SUCCESS);
    VIP_VI_ATTRIBUTES va{
        VIP_SERVICE_RELIABLE_DELIVERY, 4096, nullptr, ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    std::vector<uint8_t> buf(8192);
    VIP_MEM_ATTRIBUTES ma{ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    VIP_MEM_HANDLE mh;
    REQUIRE(VipRegisterMem(nic, buf.data(), buf.size(), &ma, &mh) == VIP_SUCCESS);
    REQUIRE(VipDestroyVi(vi) == VIP_SUCCESS);
    REQUIRE(VipDestroyCQ(cq) == VIP_SUCCESS);
    REQUIRE(VipDeregisterMem(nic, buf.data(), mh) == VIP_SUCCESS);

    auto *d = reinterpret_cast<VIP_DESCRIPTOR *>((reinterpret_cast<uintptr_t>(buf.data()) + 63) &
                                                 ~uintptr_t(63));
    VIP_DESCRIPTOR *out;
    VIP_VI_ATTRIBUTES ra;
    VIP_VI_STATE st;
    VIP_BOOLEAN b;
    VIP_VI_HANDLE vh;
    int fd;
    VIP_VI_COUNTERS counters;
    vt::Address addr(nic, vt::unique_disc("-dead"));
    auto nop = [](VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *) {};
    auto cqnop = [](VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN) {};
    // A destroyed VI.
    CHECK(VipDestroyVi(vi) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryVi(vi, &st, &ra, &b, &b) == VIP_INVALID_PARAMETER);
    CHECK(VipSetViAttributes(vi, &va) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectRequest(vi, addr.get(), addr.get(), 10, &ra) == VIP_INVALID_PARAMETER);
    CHECK(VipDisconnect(vi) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectPeerRequest(vi, addr.get(), addr.get(), 10) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectPeerDone(vi, &ra) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectPeerWait(vi, &ra) == VIP_INVALID_PARAMETER);
    CHECK(VipPostSend(vi, d, mh) == VIP_INVALID_PARAMETER);
    CHECK(VipPostRecv(vi, d, mh) == VIP_INVALID_PARAMETER);
    CHECK(VipSendDone(vi, &out) == VIP_INVALID_PARAMETER);
    CHECK(VipRecvDone(vi, &out) == VIP_INVALID_PARAMETER);
    CHECK(VipSendWait(vi, 10, &out) == VIP_INVALID_PARAMETER);
    CHECK(VipRecvWait(vi, 10, &out) == VIP_INVALID_PARAMETER);
    CHECK(VipSendNotify(vi, nullptr, nop) == VIP_INVALID_PARAMETER);
    CHECK(VipRecvNotify(vi, nullptr, nop) == VIP_INVALID_PARAMETER);
    CHECK(VipGetViWaitFd(vi, &fd) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryViCounters(vi, &counters) == VIP_INVALID_PARAMETER);
    // A destroyed CQ.
    CHECK(VipDestroyCQ(cq) == VIP_INVALID_PARAMETER);
    CHECK(VipResizeCQ(cq, 8) == VIP_INVALID_PARAMETER);
    CHECK(VipCQDone(cq, &vh, &b) == VIP_INVALID_PARAMETER);
    CHECK(VipCQWait(cq, 10, &vh, &b) == VIP_INVALID_PARAMETER);
    CHECK(VipCQNotify(cq, nullptr, cqnop) == VIP_INVALID_PARAMETER);
    CHECK(VipGetCQWaitFd(cq, &fd) == VIP_INVALID_PARAMETER);
    CHECK(VipCreateVi(nic, &va, cq, nullptr, &vh) == VIP_INVALID_PARAMETER);
    // A deregistered region.
    CHECK(VipDeregisterMem(nic, buf.data(), mh) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryMem(nic, buf.data(), mh, &ma) == VIP_INVALID_PARAMETER);
    CHECK(VipSetMemAttributes(nic, buf.data(), mh, &ma) == VIP_INVALID_PARAMETER);

    // A closed NIC, with a live ptag when it closed.
    REQUIRE(VipCloseNic(nic) == VIP_SUCCESS);
    VIP_NIC_ATTRIBUTES na;
    vt::AddressBuffer ab;
    VIP_CONN_HANDLE conn;
    char name[256];
    VIP_ULONG len = sizeof name;
    VIP_AUTODISCOVERY_LIST list{};
    CHECK(VipCloseNic(nic) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryNic(nic, &na) == VIP_INVALID_PARAMETER);
    CHECK(VipCreatePtag(nic, &ptag) == VIP_INVALID_PARAMETER);
    CHECK(VipDestroyPtag(nic, ptag) == VIP_INVALID_PARAMETER);
    CHECK(VipRegisterMem(nic, buf.data(), buf.size(), &ma, &mh) == VIP_INVALID_PARAMETER);
    CHECK(VipCreateVi(nic, &va, nullptr, nullptr, &vh) == VIP_INVALID_PARAMETER);
    CHECK(VipCreateCQ(nic, 4, &cq) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectWait(nic, ab.get(), 0, ab.get(), &ra, &conn) == VIP_INVALID_PARAMETER);
    CHECK(VipNSInit(nic, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipNSGetHostByName(nic, const_cast<char *>("localhost"), ab.get(), 0) ==
          VIP_INVALID_PARAMETER);
    CHECK(VipNSGetHostByAddr(nic, addr.get(), name, &len) == VIP_INVALID_PARAMETER);
    CHECK(VipNSShutdown(nic) == VIP_INVALID_PARAMETER);
    CHECK(VipErrorCallback(nic, nullptr, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipQuerySystemManagementInfo(nic, VIP_SMI_AUTODISCOVERY, &list) == VIP_INVALID_PARAMETER);
}
