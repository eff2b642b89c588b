// fork() without the Shareable extension: the child inherits nothing of
// VIPL.  Every handle of the parent is refused there and does nothing; the
// child holds none of the library's descriptors or connection memory, so the
// parent's connections go on whatever the child does, and the child can open
// its own NIC and connect.
#include "process_util.h"

#include <csignal>
#include <cstring>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace {

void notify_send(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *) {}
void notify_cq(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN) {}

std::atomic<int> g_errors{0};
void count_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR *) {
    g_errors.fetch_add(1);
}

// Everything a parent can own: NIC, ptags, a region, connected and idle
// VIs, a CQ, a pending connection request, wait fds, an error callback.
struct Parent {
    vt::PrivEp ep; // connected to the server, receive CQ `cq`
    VIP_CQ_HANDLE cq = nullptr;
    VIP_PROTECTION_HANDLE spare_ptag = nullptr;
    VIP_VI_HANDLE idle = nullptr;
    VIP_CONN_HANDLE conn = nullptr;
    std::vector<uint8_t> conn_local; // the address the pending request came to
    int vi_fd = -1, cq_fd = -1;
};

// The pending request's client: a process of its own, waiting to be accepted.
int pending_client(const std::string &disc, std::atomic<int> *result) {
    vt::Ep ep;
    if (!ep.open(1 << 16, vt::ep_opts())) return 1;
    std::vector<uint8_t> local = vt::address(ep.nic, disc + "c"),
                         remote = vt::address(ep.nic, disc);
    VIP_VI_ATTRIBUTES ra;
    result->store(
        1000 + vt::connect_request(ep.vi, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()),
                                   reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), 20000, &ra));
    vt::sleep_ms(200);
    return 0;
}

} // namespace

TEST_CASE("fork: every function called in the child with a handle of the parent is refused and "
          "changes nothing",
          "[process][fork]") {
    int status = vt::run_checked(
        [] {
            vt::Shared<vt::ServerStats> srv;
            vt::Shared<vt::Board> board;
            vt::Shared<std::atomic<int>> client_rc;
            srv->max_conns = 1;
            std::string disc = vt::unique_disc("fk"), disc2 = vt::unique_disc("fp");
            vt::Child server(vt::spawn_server(&*srv, disc));

            Parent p;
            INFO(p.ep.err);
            REQUIRE(p.ep.setup(disc));
            REQUIRE(VipErrorCallback(p.ep.nic, nullptr, count_error) == VIP_SUCCESS);
            REQUIRE(VipCreatePtag(p.ep.nic, &p.spare_ptag) == VIP_SUCCESS);
            REQUIRE(VipCreateCQ(p.ep.nic, 64, &p.cq) == VIP_SUCCESS);
            VIP_VI_ATTRIBUTES va{};
            va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
            va.MaxTransferSize = 4096;
            va.Ptag = p.ep.ptag;
            REQUIRE(VipCreateVi(p.ep.nic, &va, nullptr, p.cq, &p.idle) == VIP_SUCCESS);
            REQUIRE(VipGetViWaitFd(p.ep.vi, &p.vi_fd) == VIP_SUCCESS);
            REQUIRE(VipGetCQWaitFd(p.cq, &p.cq_fd) == VIP_SUCCESS);
            // A request that stays pending across the fork.
            vt::Child client(vt::spawn_child([&] { return pending_client(disc2, &*client_rc); }));
            p.conn_local = vt::address(p.ep.nic, disc2);
            std::vector<uint8_t> from(sizeof(VIP_NET_ADDRESS) + 128);
            VIP_VI_ATTRIBUTES ra;
            REQUIRE(VipConnectWait(p.ep.nic,
                                   reinterpret_cast<VIP_NET_ADDRESS *>(p.conn_local.data()), 10000,
                                   reinterpret_cast<VIP_NET_ADDRESS *>(from.data()), &ra,
                                   &p.conn) == VIP_SUCCESS);
            REQUIRE(p.ep.round_trip(0, 0) == "");

            VIP_NIC_ATTRIBUTES na0;
            REQUIRE(VipQueryNic(p.ep.nic, &na0) == VIP_SUCCESS);
            VIP_VI_COUNTERS cnt0;
            REQUIRE(VipQueryViCounters(p.ep.vi, &cnt0) == VIP_SUCCESS);
            VIP_MEM_ATTRIBUTES mem0;
            REQUIRE(VipQueryMem(p.ep.nic, p.ep.mem, p.ep.mh, &mem0) == VIP_SUCCESS);
            uint8_t *spare = p.ep.mem + 16384; // parent memory the child tries to use
            VIP_DESCRIPTOR *pd = p.ep.desc(40);
            vt::set_desc(pd, spare, 64, p.ep.mh);

            int cs = vt::run_child(
                [&] {
                    int n = 0;
                    auto want = [&](VIP_RETURN got, const char *call,
                                    VIP_RETURN expected = VIP_INVALID_PARAMETER) {
                        if (got != expected)
                            board->fail(n++ % vt::Board::kSlots,
                                        vt::fmt("%s: %s, expected %s", call, VipReturnString(got),
                                                VipReturnString(expected)));
                    };
                    VIP_NIC_HANDLE nic = p.ep.nic;
                    VIP_VI_HANDLE vi = p.ep.vi;
                    VIP_NIC_ATTRIBUTES na;
                    VIP_PROTECTION_HANDLE pt_out;
                    VIP_MEM_HANDLE mh_out;
                    VIP_MEM_ATTRIBUTES ma{p.ep.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
                    VIP_VI_HANDLE vi_out;
                    VIP_CQ_HANDLE cq_out;
                    VIP_VI_STATE state;
                    VIP_DESCRIPTOR *d;
                    VIP_VI_HANDLE vh;
                    VIP_BOOLEAN recv;
                    VIP_VI_COUNTERS cnt;
                    VIP_VI_ATTRIBUTES attrs = va;
                    int fd;
                    void *own = mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                    std::vector<uint8_t> addr(sizeof(VIP_NET_ADDRESS) + 128);
                    auto *a = reinterpret_cast<VIP_NET_ADDRESS *>(addr.data());
                    memcpy(a, p.conn_local.data(), p.conn_local.size());
                    auto *local = reinterpret_cast<VIP_NET_ADDRESS *>(p.conn_local.data());
                    std::vector<uint8_t> remote_buf(sizeof(VIP_NET_ADDRESS) + 128);
                    auto *remote = reinterpret_cast<VIP_NET_ADDRESS *>(remote_buf.data());
                    char name[256];
                    VIP_ULONG name_len = sizeof name;
                    std::vector<uint8_t> ad_buf(sizeof(VIP_NET_ADDRESS) + 64);
                    VIP_NET_ADDRESS *ad_ptr = reinterpret_cast<VIP_NET_ADDRESS *>(ad_buf.data());
                    VIP_AUTODISCOVERY_LIST list{0, &ad_ptr, 1};

                    want(VipQueryNic(nic, &na), "VipQueryNic");
                    want(VipCreatePtag(nic, &pt_out), "VipCreatePtag");
                    want(VipDestroyPtag(nic, p.spare_ptag), "VipDestroyPtag");
                    want(VipRegisterMem(nic, own, 1 << 16, &ma, &mh_out), "VipRegisterMem");
                    want(VipQueryMem(nic, p.ep.mem, p.ep.mh, &ma), "VipQueryMem");
                    want(VipSetMemAttributes(nic, p.ep.mem, p.ep.mh, &ma), "VipSetMemAttributes");
                    want(VipCreateVi(nic, &attrs, nullptr, nullptr, &vi_out), "VipCreateVi");
                    want(VipCreateCQ(nic, 16, &cq_out), "VipCreateCQ");
                    want(VipCreateCQEx(nic, 16, VIP_CQ_SHAREABLE, &cq_out), "VipCreateCQEx");
                    want(VipQueryVi(vi, &state, nullptr, nullptr, nullptr), "VipQueryVi");
                    want(VipSetViAttributes(p.idle, &attrs), "VipSetViAttributes");
                    want(VipPostRecv(vi, pd, p.ep.mh), "VipPostRecv");
                    want(VipPostSend(vi, pd, p.ep.mh), "VipPostSend");
                    want(VipSendDone(vi, &d), "VipSendDone");
                    want(VipRecvDone(vi, &d), "VipRecvDone");
                    want(VipSendWait(vi, 10, &d), "VipSendWait");
                    want(VipRecvWait(vi, 10, &d), "VipRecvWait");
                    want(VipSendNotify(vi, nullptr, notify_send), "VipSendNotify");
                    want(VipRecvNotify(vi, nullptr, notify_send), "VipRecvNotify");
                    want(VipQueryViCounters(vi, &cnt), "VipQueryViCounters");
                    want(VipGetViWaitFd(vi, &fd), "VipGetViWaitFd");
                    want(VipGetCQWaitFd(p.cq, &fd), "VipGetCQWaitFd");
                    want(VipCQDone(p.cq, &vh, &recv), "VipCQDone");
                    want(VipCQWait(p.cq, 10, &vh, &recv), "VipCQWait");
                    want(VipCQNotify(p.cq, nullptr, notify_cq), "VipCQNotify");
                    want(VipResizeCQ(p.cq, 128), "VipResizeCQ");

                    VIP_CONN_HANDLE c2;
                    want(VipConnectWait(nic, local, 10, remote, &attrs, &c2), "VipConnectWait");
                    want(VipConnectAccept(p.conn, p.idle), "VipConnectAccept");
                    want(VipConnectReject(p.conn), "VipConnectReject");
                    want(VipConnectRequest(p.idle, local, a, 10, &attrs), "VipConnectRequest");
                    want(VipConnectPeerRequest(p.idle, local, a, 10), "VipConnectPeerRequest");
                    want(VipConnectPeerDone(p.idle, &attrs), "VipConnectPeerDone");
                    want(VipConnectPeerWait(p.idle, &attrs), "VipConnectPeerWait");
                    want(VipDisconnect(vi), "VipDisconnect");
                    want(VipNSInit(nic, nullptr), "VipNSInit");
                    want(VipNSGetHostByName(nic, const_cast<char *>("localhost"), a, 0),
                         "VipNSGetHostByName");
                    want(VipNSGetHostByAddr(nic, local, name, &name_len), "VipNSGetHostByAddr");
                    want(VipNSShutdown(nic), "VipNSShutdown");
                    want(VipErrorCallback(nic, nullptr, count_error), "VipErrorCallback");
                    want(VipQuerySystemManagementInfo(nic, VIP_SMI_AUTODISCOVERY, &list),
                         "VipQuerySystemManagementInfo");
                    want(VipDestroyVi(p.idle), "VipDestroyVi(idle)");
                    want(VipDestroyVi(vi), "VipDestroyVi(connected)");
                    want(VipDestroyCQ(p.cq), "VipDestroyCQ");
                    want(VipDeregisterMem(nic, p.ep.mem, p.ep.mh), "VipDeregisterMem");
                    want(VipCloseNic(nic), "VipCloseNic");

                    // The child's own NIC: the parent's memory handle means nothing there.
                    vt::Ep own_ep;
                    vt::Opts o = vt::ep_opts();
                    if (!own_ep.open(1 << 16, o)) {
                        board->fail(n++, "own NIC: " + own_ep.err);
                        return n;
                    }
                    want(VipPostRecv(own_ep.vi, pd, p.ep.mh),
                         "VipPostRecv(own VI, parent's descriptor and handle)");
                    want(VipDeregisterMem(own_ep.nic, p.ep.mem, p.ep.mh),
                         "VipDeregisterMem(own NIC, parent's region)");
                    VIP_MEM_ATTRIBUTES got;
                    want(VipQueryMem(own_ep.nic, p.ep.mem, p.ep.mh, &got),
                         "VipQueryMem(own NIC, parent's region)");
                    // In its own region, a descriptor whose buffer is the parent's region.
                    VIP_DESCRIPTOR *od = own_ep.desc(0);
                    vt::set_desc(od, spare, 64, p.ep.mh);
                    VIP_RETURN rc = VipPostRecv(own_ep.vi, od, own_ep.mh);
                    if (!(rc == VIP_DESCRIPTOR_ERROR &&
                          (od->CS.Status & VIP_STATUS_PROTECTION_ERROR)))
                        board->fail(n++,
                                    vt::fmt("own VI, buffer in the parent's region: %s status 0x%x",
                                            VipReturnString(rc), od->CS.Status));
                    return n;
                },
                30);
            INFO("child " << vt::status_text(cs) << "\n" << board->all());
            CHECK(cs == 0);

            // Nothing changed for the parent.
            VIP_NIC_ATTRIBUTES na1;
            REQUIRE(VipQueryNic(p.ep.nic, &na1) == VIP_SUCCESS);
            CHECK(std::string(na0.Name) == std::string(na1.Name));
            CHECK(na0.MaxVI == na1.MaxVI);
            CHECK(na0.MaxRegisterRegions == na1.MaxRegisterRegions);
            CHECK(memcmp(na0.LocalNicAddress, na1.LocalNicAddress, na0.NicAddressLen) == 0);
            VIP_VI_COUNTERS cnt1;
            REQUIRE(VipQueryViCounters(p.ep.vi, &cnt1) == VIP_SUCCESS);
            CHECK(memcmp(&cnt0, &cnt1, sizeof cnt0) == 0);
            VIP_MEM_ATTRIBUTES mem1;
            REQUIRE(VipQueryMem(p.ep.nic, p.ep.mem, p.ep.mh, &mem1) == VIP_SUCCESS);
            CHECK(mem0.Ptag == mem1.Ptag);
            CHECK(mem0.EnableRdmaWrite == mem1.EnableRdmaWrite);
            CHECK(mem0.EnableRdmaRead == mem1.EnableRdmaRead);
            CHECK(mem0.Shareable == mem1.Shareable);
            VIP_VI_STATE state;
            VIP_BOOLEAN sq_empty, rq_empty;
            REQUIRE(VipQueryVi(p.ep.vi, &state, nullptr, &sq_empty, &rq_empty) == VIP_SUCCESS);
            CHECK(state == VIP_STATE_CONNECTED);
            CHECK(sq_empty == VIP_TRUE);
            CHECK(rq_empty == VIP_FALSE); // its receives are still posted
            CHECK(vt::vi_state(p.idle) == VIP_STATE_IDLE);
            for (uint32_t i = 1; i <= 20; ++i) REQUIRE(p.ep.round_trip(0, i) == "");
            // The pending request is still the parent's to accept, with the idle VI and its CQ.
            REQUIRE(VipConnectAccept(p.conn, p.idle) == VIP_SUCCESS);
            REQUIRE(vt::wait_for([&] { return client_rc->load() != 0; }, 5000));
            CHECK(client_rc->load() == 1000 + VIP_SUCCESS);
            CHECK(vt::vi_state(p.idle) == VIP_STATE_CONNECTED);
            VIP_VI_HANDLE vh;
            VIP_BOOLEAN recv;
            CHECK(VipCQDone(p.cq, &vh, &recv) == VIP_NOT_DONE);
            CHECK(VipDestroyPtag(p.ep.nic, p.spare_ptag) == VIP_SUCCESS);
            CHECK(g_errors.load() == 0); // no error reached the parent's callback
            CHECK(srv->ended.load() == 0);
            CHECK(srv->bad.load() == 0);
            CHECK(srv->next_seq[0].load() == 21);
            client.wait(10);
            return 0;
        },
        60);
    REQUIRE(status == 0);
}

TEST_CASE("fork: the parent's connection carries messages while the child runs and after it ends",
          "[process][fork]") {
    enum class End { exits, killed, killed_connected };
    auto end = GENERATE(End::exits, End::killed, End::killed_connected);
    INFO((end == End::exits    ? "the child exits"
          : end == End::killed ? "the child is killed"
                               : "the child, connected itself, is killed"));
    int status = vt::run_checked(
        [&] {
            vt::Shared<vt::ServerStats> srv, srv2;
            srv->max_conns = 1;
            srv2->max_conns = 1;
            std::string disc = vt::unique_disc("fm"), disc2 = vt::unique_disc("fn");
            vt::Child server(vt::spawn_server(&*srv, disc));
            vt::Child server2(vt::spawn_server(&*srv2, disc2));
            vt::PrivEp ep;
            INFO(ep.err);
            REQUIRE(ep.setup(disc));
            uint32_t seq = 0;
            for (; seq < 10; ++seq) REQUIRE(ep.round_trip(0, seq) == "");
            vt::Shared<std::atomic<int>> child_trips;
            vt::Child child(vt::spawn_child([&] {
                if (end == End::exits) {
                    vt::sleep_ms(150);
                    return 0;
                }
                if (end == End::killed_connected) {
                    vt::PrivEp own;
                    if (!own.setup(disc2)) return 1;
                    for (uint32_t i = 0;; ++i) {
                        if (!own.round_trip(1, i).empty()) return 2;
                        child_trips->fetch_add(1);
                    }
                }
                pause();
                return 0;
            }));
            double t_end = vt::now_ms() + 150;
            while (vt::now_ms() < t_end) REQUIRE(ep.round_trip(0, seq++) == "");
            if (end == End::killed_connected) {
                CHECK(vt::wait_for([&] { return child_trips->load() > 10; }, 5000));
            }
            if (end == End::exits) {
                CHECK(child.wait(10) == 0);
            } else {
                child.kill_now();
                CHECK(WIFSIGNALED(child.wait(10)));
            }
            if (end == End::killed_connected) {
                // The child's own connection ends with it; the parent's does not.
                CHECK(vt::wait_for([&] { return srv2->ended.load() == 1; }, 1000));
                CHECK(srv2->bad.load() == 0);
            }
            vt::sleep_ms(50); // beyond the peer's liveness check
            for (uint32_t i = 0; i < 50; ++i) REQUIRE(ep.round_trip(0, seq++) == "");
            CHECK(ep.state() == VIP_STATE_CONNECTED);
            CHECK(srv->ended.load() == 0);
            CHECK(srv->bad.load() == 0);
            CHECK(srv->next_seq[0].load() == seq);
            // And it ends when the parent ends it.
            ep.close();
            CHECK(vt::wait_for([&] { return srv->ended.load() == 1; }, 1000));
            return 0;
        },
        60);
    REQUIRE(status == 0);
}

TEST_CASE("fork: the child opens its own NIC and connects, also while parent threads sleep in "
          "the library",
          "[process][fork]") {
    int status = vt::run_checked(
        [] {
            vt::Shared<vt::ServerStats> srv, srv2;
            vt::Shared<vt::Board> board;
            srv->max_conns = 1;
            srv2->max_conns = 1;
            std::string disc = vt::unique_disc("fo"), disc2 = vt::unique_disc("fq");
            std::string child_disc = vt::unique_disc("fr");
            vt::Child server(vt::spawn_server(&*srv, disc));
            vt::Child server2(vt::spawn_server(&*srv2, disc2));
            vt::PrivEp ep;
            INFO(ep.err);
            REQUIRE(ep.setup(disc));
            REQUIRE(ep.round_trip(0, 0) == "");
            // Threads of the parent asleep inside the library when it forks.
            std::atomic<VIP_RETURN> waited{VIP_SUCCESS}, listened{VIP_SUCCESS};
            std::thread sleeper([&] {
                VIP_DESCRIPTOR *d;
                waited = VipRecvWait(ep.vi, 1000, &d);
            });
            vt::Nic listen_nic(vt::device());
            std::thread listener([&] {
                std::vector<uint8_t> local = vt::address(listen_nic.nic, vt::unique_disc("fl"));
                std::vector<uint8_t> from(sizeof(VIP_NET_ADDRESS) + 128);
                VIP_VI_ATTRIBUTES ra;
                VIP_CONN_HANDLE conn;
                listened = VipConnectWait(
                    listen_nic.nic, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()), 1000,
                    reinterpret_cast<VIP_NET_ADDRESS *>(from.data()), &ra, &conn);
            });
            vt::sleep_ms(100);
            vt::Child child(vt::spawn_checked([&] {
                vt::PrivEp own;
                if (!own.setup(disc2, 5000)) {
                    board->fail(0, "child connecting to a server: " + own.err);
                    return 1;
                }
                for (uint32_t i = 0; i < 100; ++i) {
                    std::string e = own.round_trip(1, i);
                    if (!e.empty()) {
                        board->fail(1, "child: " + e);
                        return 2;
                    }
                }
                // And as a server, with its parent as client.
                vt::Ep srv_ep;
                vt::Opts o = vt::ep_opts();
                if (!srv_ep.open(1 << 16, o)) return 3;
                vt::set_desc(srv_ep.desc(0), srv_ep.mem + 4096, 64, srv_ep.mh);
                if (!srv_ep.post_recv(srv_ep.desc(0)) || !srv_ep.accept(child_disc, 10000) ||
                    !srv_ep.wait_recv(srv_ep.desc(0), 5000)) {
                    board->fail(2, "child as server: " + srv_ep.err);
                    return 4;
                }
                uint32_t s2, q2;
                std::string why;
                if (!vt::parse_msg(srv_ep.mem + 4096, srv_ep.desc(0)->CS.Length, &s2, &q2, &why) ||
                    s2 != 7 || q2 != 7) {
                    board->fail(3, "child as server got a wrong message " + why);
                    return 5;
                }
                return 0;
            }));
            sleeper.join();
            listener.join();
            CHECK(waited.load() == VIP_TIMEOUT);
            CHECK(listened.load() == VIP_TIMEOUT);
            // The parent, client of its child.
            vt::Ep cl;
            vt::Opts o = vt::ep_opts();
            REQUIRE(cl.open(1 << 16, o));
            INFO(cl.err);
            REQUIRE(cl.connect(child_disc, 10000));
            vt::make_msg(cl.mem + 4096, 7, 7);
            vt::set_desc(cl.desc(0), cl.mem + 4096, vt::kMsgBytes, cl.mh);
            REQUIRE(cl.post_send(cl.desc(0)));
            REQUIRE(cl.wait_send(cl.desc(0), 5000));
            int cs = child.wait(20);
            INFO("child " << vt::status_text(cs) << "\n" << board->all());
            CHECK(cs == 0);
            CHECK(srv2->next_seq[1].load() == 100);
            CHECK(srv2->bad.load() == 0);
            REQUIRE(ep.round_trip(0, 1) == "");
            CHECK(srv->ended.load() == 0);
            return 0;
        },
        60);
    REQUIRE(status == 0);
}
