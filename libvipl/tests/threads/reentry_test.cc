// VIPL called from a signal handler that interrupted a VIPL call on the same
// thread: every function returns VIP_ERROR_REENTERED at once and does
// nothing, the interrupted call goes on (a wait returns VIP_INTERRUPTED), and
// everything works afterwards.
#include "thr_util.h"

#include <atomic>
#include <cstring>
#include <ctime>
#include <random>
#include <thread>

namespace {

constexpr int kSig = SIGUSR1;

// What the handler does, set up by the test before signalling.
std::function<void()> *g_body = nullptr;
std::atomic<int> g_runs{0};
std::atomic<long> g_handler_us{0};

long mono_us() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000L + t.tv_nsec / 1000;
}

void on_signal(int, siginfo_t *, void *) {
    long t0 = mono_us();
    if (g_body) (*g_body)();
    g_handler_us = mono_us() - t0;
    ++g_runs;
}

// Fills an object with a pattern, to tell whether anybody wrote it.
template <class T>
void poison(T &x) {
    memset(static_cast<void *>(&x), 0xA5, sizeof x);
}
template <class T>
bool poisoned(const T &x) {
    const auto *p = reinterpret_cast<const unsigned char *>(&x);
    for (size_t i = 0; i < sizeof x; ++i)
        if (p[i] != 0xA5) return false;
    return true;
}

std::vector<uint8_t> addr(VIP_NIC_HANDLE nic, const std::string &disc) {
    std::vector<uint8_t> a(sizeof(VIP_NET_ADDRESS) + 64 + disc.size());
    auto *na = reinterpret_cast<VIP_NET_ADDRESS *>(a.data());
    char host[] = "localhost";
    REQUIRE(VipNSGetHostByName(nic, host, na, 0) == VIP_SUCCESS);
    na->DiscriminatorLen = static_cast<VIP_UINT16>(disc.size());
    memcpy(na->HostAddress + na->HostAddressLen, disc.data(), disc.size());
    return a;
}
VIP_NET_ADDRESS *as_addr(std::vector<uint8_t> &a) {
    return reinterpret_cast<VIP_NET_ADDRESS *>(a.data());
}

struct Fixture {
    vt::Nic na{vt::device()}, nb{vt::device()};
    vt::Memory ma{na, 1 << 18}, mb{nb, 1 << 18};
    VIP_CQ_HANDLE cq = nullptr;
    vt::Pair p;
    Fixture() {
        REQUIRE(VipCreateCQ(na.nic, 16, &cq) == VIP_SUCCESS);
        // Reliable reception: a send completes once b has it, on any provider.
        p = vt::connect_pair(na, nb, vt::vi_attrs(na, VIP_SERVICE_RELIABLE_RECEPTION),
                             vt::vi_attrs(nb, VIP_SERVICE_RELIABLE_RECEPTION), nullptr, cq);
    }
    ~Fixture() {
        vt::destroy_vi(p.a);
        vt::destroy_vi(p.b);
        VipDestroyCQ(cq);
    }
    uint8_t *abuf(int i) { return ma.base + 65536 + i * 4096; }
    uint8_t *bbuf(int i) { return mb.base + 65536 + i * 4096; }
};

} // namespace

TEST_CASE("VipPostSend, VipRecvDone and VipQueryVi from a handler interrupting a wait are "
          "refused and do nothing",
          "[threads][signals][reentry]") {
    bool restart = GENERATE(false, true);
    const char *waits[] = {"VipRecvWait", "VipSendWait", "VipCQWait", "VipConnectWait"};
    int which = GENERATE(0, 1, 2, 3);
    INFO((restart ? "SA_RESTART" : "no SA_RESTART") << ", interrupting " << waits[which]);
    vt::ScopedHandler h(kSig, on_signal, restart);
    Fixture f;
    // b holds a receive for the message the handler tries to send; a holds one
    // for a message nobody sends yet.
    vt::set_desc(f.mb.desc(0), f.bbuf(0), 4096, f.mb.mh);
    REQUIRE(VipPostRecv(f.p.b, f.mb.desc(0), f.mb.mh) == VIP_SUCCESS);
    vt::set_desc(f.ma.desc(0), f.abuf(0), 4096, f.ma.mh);
    REQUIRE(VipPostRecv(f.p.a, f.ma.desc(0), f.ma.mh) == VIP_SUCCESS);
    // For VipSendWait to sleep: a send b has not read yet.
    vt::set_desc(f.mb.desc(1), f.bbuf(1), 4096, f.mb.mh);
    REQUIRE(VipPostRecv(f.p.b, f.mb.desc(1), f.mb.mh) == VIP_SUCCESS);
    if (which == 1) {
        vt::set_desc(f.ma.desc(2), f.abuf(2), 4096, f.ma.mh);
        REQUIRE(VipPostSend(f.p.a, f.ma.desc(2), f.ma.mh) == VIP_SUCCESS);
    }
    // The handler's send: a valid descriptor the library would otherwise deliver.
    VIP_DESCRIPTOR *sd = f.ma.desc(1);
    vt::fill_msg(f.abuf(1), 100, 1, 1);
    vt::set_desc(sd, f.abuf(1), 100, f.ma.mh);

    VIP_RETURN rc_post = VIP_NOT_DONE, rc_done = VIP_NOT_DONE, rc_query = VIP_NOT_DONE;
    VIP_DESCRIPTOR *got;
    VIP_VI_STATE state;
    VIP_VI_ATTRIBUTES attrs;
    VIP_BOOLEAN sq_empty, rq_empty;
    poison(got);
    poison(state);
    poison(attrs);
    poison(sq_empty);
    poison(rq_empty);
    std::function<void()> body = [&] {
        rc_post = VipPostSend(f.p.a, sd, f.ma.mh);
        rc_done = VipRecvDone(f.p.a, &got);
        rc_query = VipQueryVi(f.p.a, &state, &attrs, &sq_empty, &rq_empty);
    };
    g_body = &body;
    g_runs = 0;

    std::string disc = vt::unique_disc("-re");
    std::vector<uint8_t> local = addr(f.na.nic, disc);
    {
        VIP_DESCRIPTOR *d = nullptr;
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN recv;
        vt::AddressBuffer remote;
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        vt::Call c([&] {
            switch (which) {
            case 0:
                return VipRecvWait(f.p.a, 10000, &d);
            case 1:
                return VipSendWait(f.p.a, 10000, &d);
            case 2:
                return VipCQWait(f.cq, 10000, &vi, &recv);
            default:
                return VipConnectWait(f.na.nic, as_addr(local), 10000, remote.get(), &ra, &conn);
            }
        });
        REQUIRE(c.asleep());
        c.signal(kSig);
        CHECK(c.finished(3000));
        CHECK(c.join() == VIP_INTERRUPTED);
    }
    g_body = nullptr;
    CHECK(g_runs == 1);
    CHECK(rc_post == VIP_ERROR_REENTERED);
    CHECK(rc_done == VIP_ERROR_REENTERED);
    CHECK(rc_query == VIP_ERROR_REENTERED);
    // Nothing was written or queued.
    CHECK(poisoned(got));
    CHECK(poisoned(state));
    CHECK(poisoned(attrs));
    CHECK(poisoned(sq_empty));
    CHECK(poisoned(rq_empty));
    CHECK(sd->CS.Status == 0);
    VIP_BOOLEAN sqe = VIP_FALSE, rqe = VIP_TRUE;
    REQUIRE(VipQueryVi(f.p.a, &state, nullptr, &sqe, &rqe) == VIP_SUCCESS);
    CHECK(state == VIP_STATE_CONNECTED);
    CHECK(bool(sqe) == (which != 1));
    CHECK_FALSE(rqe);
    VIP_DESCRIPTOR *d = nullptr;
    if (which == 1) {
        // The send a really posted arrives first.
        REQUIRE(VipRecvWait(f.p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(d == f.mb.desc(0));
        REQUIRE(VipSendWait(f.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(d == f.ma.desc(2));
    }
    // The handler's send never left.
    vt::sleep_ms(20);
    CHECK(VipRecvDone(f.p.b, &d) == VIP_NOT_DONE);

    // Later calls work: the same send now goes through, and a's receive completes.
    REQUIRE(VipPostSend(f.p.a, sd, f.ma.mh) == VIP_SUCCESS);
    REQUIRE(VipRecvWait(f.p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
    int slot = which == 1 ? 1 : 0;
    CHECK(d == f.mb.desc(slot));
    uint32_t sender = 0, seq = 0;
    CHECK((vt::check_msg(f.bbuf(slot), d->CS.Length, &sender, &seq) && seq == 1));
    REQUIRE(VipSendWait(f.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d == sd);
    vt::set_desc(f.mb.desc(3), f.bbuf(3), 8, f.mb.mh);
    REQUIRE(VipPostSend(f.p.b, f.mb.desc(3), f.mb.mh) == VIP_SUCCESS);
    REQUIRE(VipRecvWait(f.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d == f.ma.desc(0));
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    CHECK(VipCQWait(f.cq, vt::kWaitMs, &vi, &recv) == VIP_SUCCESS);
}

namespace {

// One call made from the handler: its result and whether it left its outputs alone.
struct Attempt {
    const char *name;
    std::function<VIP_RETURN()> call;
    VIP_RETURN rc = VIP_NOT_DONE;
};

std::atomic<int> g_notified{0};
void on_notify(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *) {
    ++g_notified;
}
void on_cq_notify(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN) {
    ++g_notified;
}
void on_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR *) {
    ++g_notified;
}

} // namespace

TEST_CASE("every function refused (fresh process)", "[.][threads-reentry-all]") {
    vt::ScopedHandler h(kSig, on_signal, false);
    const int threads_before = vt::thread_count();
    Fixture f;
    // A second connection with a completed receive and a completed send
    // nobody has taken yet, and a CQ holding one entry.
    vt::Nic nc(vt::device()), nd(vt::device());
    vt::Memory mc(nc, 1 << 16), md(nd, 1 << 16);
    VIP_CQ_HANDLE full_cq;
    REQUIRE(VipCreateCQ(nd.nic, 8, &full_cq) == VIP_SUCCESS);
    vt::Pair q = vt::connect_pair(nc, nd, vt::vi_attrs(nc), vt::vi_attrs(nd), nullptr, nullptr,
                                  nullptr, full_cq);
    vt::set_desc(md.desc(0), md.base + 8192, 256, md.mh);
    REQUIRE(VipPostRecv(q.b, md.desc(0), md.mh) == VIP_SUCCESS);
    vt::set_desc(mc.desc(0), mc.base + 8192, 64, mc.mh);
    REQUIRE(VipPostSend(q.a, mc.desc(0), mc.mh) == VIP_SUCCESS);
    {
        // Done on the other queue of each VI makes it progress without taking
        // these completions.
        VIP_DESCRIPTOR *none;
        double end = vt::now_ms() + vt::kWaitMs;
        while ((!(md.desc(0)->CS.Status & VIP_STATUS_DONE) ||
                !(mc.desc(0)->CS.Status & VIP_STATUS_DONE)) &&
               vt::now_ms() < end) {
            REQUIRE(VipSendDone(q.b, &none) == VIP_NOT_DONE);
            REQUIRE(VipRecvDone(q.a, &none) == VIP_NOT_DONE);
        }
        REQUIRE((md.desc(0)->CS.Status & VIP_STATUS_DONE));
        REQUIRE((mc.desc(0)->CS.Status & VIP_STATUS_DONE));
    }
    // Spare objects the handler tries to destroy or change.
    VIP_PROTECTION_HANDLE spare_ptag;
    REQUIRE(VipCreatePtag(f.na.nic, &spare_ptag) == VIP_SUCCESS);
    std::vector<uint8_t> spare_mem(8192);
    VIP_MEM_ATTRIBUTES mattrs{f.na.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    VIP_MEM_HANDLE spare_mh;
    REQUIRE(VipRegisterMem(f.na.nic, spare_mem.data(), spare_mem.size(), &mattrs, &spare_mh) ==
            VIP_SUCCESS);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(f.na);
    VIP_VI_HANDLE idle;
    REQUIRE(VipCreateVi(f.na.nic, &va, nullptr, nullptr, &idle) == VIP_SUCCESS);
    VIP_CQ_HANDLE spare_cq;
    REQUIRE(VipCreateCQ(f.na.nic, 4, &spare_cq) == VIP_SUCCESS);
    std::string disc = vt::unique_disc("-all");
    std::vector<uint8_t> local = addr(f.na.nic, disc), remote = addr(f.na.nic, disc + "r");
    vt::set_desc(f.ma.desc(0), f.abuf(0), 4096, f.ma.mh);
    REQUIRE(VipPostRecv(f.p.a, f.ma.desc(0), f.ma.mh) == VIP_SUCCESS);
    vt::set_desc(f.mb.desc(0), f.bbuf(0), 4096, f.mb.mh);
    REQUIRE(VipPostRecv(f.p.b, f.mb.desc(0), f.mb.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *sd = f.ma.desc(1);
    vt::set_desc(sd, f.abuf(1), 100, f.ma.mh);
    vt::set_desc(f.ma.desc(2), f.abuf(2), 4096, f.ma.mh);

    // Outputs, poisoned: a refused call writes none of them.
    VIP_NIC_HANDLE o_nic;
    VIP_NIC_ATTRIBUTES o_nattrs;
    VIP_PROTECTION_HANDLE o_ptag;
    VIP_MEM_HANDLE o_mh;
    VIP_MEM_ATTRIBUTES o_mattrs;
    VIP_VI_HANDLE o_vi;
    VIP_VI_STATE o_state;
    VIP_VI_ATTRIBUTES o_vattrs;
    VIP_BOOLEAN o_bool;
    VIP_DESCRIPTOR *o_desc;
    VIP_CQ_HANDLE o_cq;
    VIP_CONN_HANDLE o_conn;
    VIP_VI_COUNTERS o_counters;
    int o_fd;
    char o_name[64];
    VIP_ULONG o_len = sizeof o_name;
    std::vector<uint8_t> o_addr(sizeof(VIP_NET_ADDRESS) + 128);
    VIP_NET_ADDRESS *oa = as_addr(o_addr);
    poison(o_nic), poison(o_nattrs), poison(o_ptag), poison(o_mh), poison(o_mattrs);
    poison(o_vi), poison(o_state), poison(o_vattrs), poison(o_bool), poison(o_desc);
    poison(o_cq), poison(o_conn), poison(o_counters);
    poison(o_fd), poison(o_name);
    memset(o_addr.data(), 0xA5, o_addr.size());
    std::vector<uint8_t> addr_before = o_addr;
    VIP_VI_ATTRIBUTES changed = va;
    changed.MaxTransferSize = 4096;
    VIP_MEM_ATTRIBUTES rdma = mattrs;
    rdma.EnableRdmaWrite = VIP_TRUE;
    VIP_PVOID garbage = reinterpret_cast<VIP_PVOID>(0x123456789abcull);
    VIP_AUTODISCOVERY_LIST ad{};
    char host[] = "localhost";

    std::vector<Attempt> attempts = {
        {"VipOpenNic", [&] { return VipOpenNic(vt::device().c_str(), &o_nic); }},
        {"VipCloseNic", [&] { return VipCloseNic(f.na.nic); }},
        {"VipQueryNic", [&] { return VipQueryNic(f.na.nic, &o_nattrs); }},
        {"VipCreatePtag", [&] { return VipCreatePtag(f.na.nic, &o_ptag); }},
        {"VipDestroyPtag", [&] { return VipDestroyPtag(f.na.nic, spare_ptag); }},
        {"VipRegisterMem",
         [&] { return VipRegisterMem(f.na.nic, spare_mem.data(), 4096, &mattrs, &o_mh); }},
        {"VipDeregisterMem",
         [&] { return VipDeregisterMem(f.na.nic, spare_mem.data(), spare_mh); }},
        {"VipQueryMem",
         [&] { return VipQueryMem(f.na.nic, spare_mem.data(), spare_mh, &o_mattrs); }},
        {"VipSetMemAttributes",
         [&] { return VipSetMemAttributes(f.na.nic, spare_mem.data(), spare_mh, &rdma); }},
        {"VipCreateVi", [&] { return VipCreateVi(f.na.nic, &va, nullptr, nullptr, &o_vi); }},
        {"VipDestroyVi", [&] { return VipDestroyVi(idle); }},
        {"VipQueryVi", [&] { return VipQueryVi(f.p.a, &o_state, &o_vattrs, &o_bool, &o_bool); }},
        {"VipSetViAttributes", [&] { return VipSetViAttributes(idle, &changed); }},
        {"VipConnectWait",
         [&] { return VipConnectWait(f.na.nic, as_addr(local), 5000, oa, &o_vattrs, &o_conn); }},
        {"VipConnectAccept", [&] { return VipConnectAccept(garbage, idle); }},
        {"VipConnectReject", [&] { return VipConnectReject(garbage); }},
        {"VipConnectRequest",
         [&] { return VipConnectRequest(idle, as_addr(local), as_addr(remote), 5000, &o_vattrs); }},
        {"VipDisconnect", [&] { return VipDisconnect(f.p.a); }},
        {"VipConnectPeerRequest",
         [&] { return VipConnectPeerRequest(idle, as_addr(local), as_addr(remote), 5000); }},
        {"VipConnectPeerDone", [&] { return VipConnectPeerDone(idle, &o_vattrs); }},
        {"VipConnectPeerWait", [&] { return VipConnectPeerWait(idle, &o_vattrs); }},
        {"VipPostSend", [&] { return VipPostSend(f.p.a, sd, f.ma.mh); }},
        {"VipSendDone", [&] { return VipSendDone(q.a, &o_desc); }},
        {"VipSendWait", [&] { return VipSendWait(q.a, 5000, &o_desc); }},
        {"VipSendNotify", [&] { return VipSendNotify(q.a, nullptr, on_notify); }},
        {"VipPostRecv", [&] { return VipPostRecv(f.p.a, f.ma.desc(2), f.ma.mh); }},
        {"VipRecvDone", [&] { return VipRecvDone(q.b, &o_desc); }},
        {"VipRecvWait", [&] { return VipRecvWait(q.b, 5000, &o_desc); }},
        {"VipRecvNotify", [&] { return VipRecvNotify(q.b, nullptr, on_notify); }},
        {"VipCreateCQ", [&] { return VipCreateCQ(f.na.nic, 4, &o_cq); }},
        {"VipCreateCQEx", [&] { return VipCreateCQEx(f.na.nic, 4, 0, &o_cq); }},
        {"VipDestroyCQ", [&] { return VipDestroyCQ(spare_cq); }},
        {"VipResizeCQ", [&] { return VipResizeCQ(spare_cq, 64); }},
        {"VipCQDone", [&] { return VipCQDone(full_cq, &o_vi, &o_bool); }},
        {"VipCQWait", [&] { return VipCQWait(full_cq, 5000, &o_vi, &o_bool); }},
        {"VipCQNotify", [&] { return VipCQNotify(full_cq, nullptr, on_cq_notify); }},
        {"VipNSInit", [&] { return VipNSInit(f.na.nic, nullptr); }},
        {"VipNSGetHostByName", [&] { return VipNSGetHostByName(f.na.nic, host, oa, 0); }},
        {"VipNSGetHostByAddr",
         [&] { return VipNSGetHostByAddr(f.na.nic, as_addr(local), o_name, &o_len); }},
        {"VipNSShutdown", [&] { return VipNSShutdown(f.na.nic); }},
        {"VipErrorCallback", [&] { return VipErrorCallback(f.na.nic, nullptr, on_error); }},
        {"VipQuerySystemManagementInfo",
         [&] { return VipQuerySystemManagementInfo(f.na.nic, VIP_SMI_AUTODISCOVERY, &ad); }},
        {"VipGetViWaitFd", [&] { return VipGetViWaitFd(f.p.b, &o_fd); }},
        {"VipGetCQWaitFd", [&] { return VipGetCQWaitFd(full_cq, &o_fd); }},
        {"VipQueryViCounters", [&] { return VipQueryViCounters(f.p.a, &o_counters); }},
    };
    std::function<void()> body = [&] {
        for (Attempt &a : attempts) a.rc = a.call();
    };
    g_body = &body;
    g_runs = 0;
    {
        VIP_DESCRIPTOR *d = nullptr;
        vt::Call c([&] { return VipRecvWait(f.p.a, 10000, &d); });
        REQUIRE(c.asleep());
        c.signal(kSig);
        CHECK(c.finished(3000));
        CHECK(c.join() == VIP_INTERRUPTED);
    }
    g_body = nullptr;
    REQUIRE(g_runs == 1);
    for (Attempt &a : attempts) {
        INFO(a.name << " returned " << VipReturnString(a.rc));
        CHECK(a.rc == VIP_ERROR_REENTERED);
    }
    // At once: the waits and connection calls among them did not block.
    INFO("the handler took " << g_handler_us / 1000.0 << " ms");
    CHECK(g_handler_us < 500000);

    // No output written.
    CHECK(poisoned(o_nic));
    CHECK(poisoned(o_nattrs));
    CHECK(poisoned(o_ptag));
    CHECK(poisoned(o_mh));
    CHECK(poisoned(o_mattrs));
    CHECK(poisoned(o_vi));
    CHECK(poisoned(o_state));
    CHECK(poisoned(o_vattrs));
    CHECK(poisoned(o_bool));
    CHECK(poisoned(o_desc));
    CHECK(poisoned(o_cq));
    CHECK(poisoned(o_conn));
    CHECK(poisoned(o_counters));
    CHECK(poisoned(o_fd));
    CHECK(poisoned(o_name));
    CHECK(o_addr == addr_before);
    // Nothing done: no thread, everything still there and unchanged.
    CHECK(vt::thread_count() == threads_before);
    VIP_NIC_ATTRIBUTES nattrs;
    CHECK(VipQueryNic(f.na.nic, &nattrs) == VIP_SUCCESS);
    CHECK(vt::vi_state(f.p.a) == VIP_STATE_CONNECTED);
    VIP_VI_ATTRIBUTES now;
    REQUIRE(VipQueryVi(idle, nullptr, &now, nullptr, nullptr) == VIP_SUCCESS);
    CHECK(now.MaxTransferSize == va.MaxTransferSize);
    VIP_MEM_ATTRIBUTES mnow;
    REQUIRE(VipQueryMem(f.na.nic, spare_mem.data(), spare_mh, &mnow) == VIP_SUCCESS);
    CHECK_FALSE(mnow.EnableRdmaWrite);
    CHECK(sd->CS.Status == 0);
    VIP_DESCRIPTOR *d = nullptr;
    CHECK(VipRecvDone(f.p.b, &d) == VIP_NOT_DONE);
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    // The completions the handler tried to take are still there, in order.
    REQUIRE(VipCQDone(full_cq, &vi, &recv) == VIP_SUCCESS);
    CHECK((vi == q.b && recv));
    REQUIRE(VipRecvDone(q.b, &d) == VIP_SUCCESS);
    CHECK(d == md.desc(0));
    REQUIRE(VipSendDone(q.a, &d) == VIP_SUCCESS);
    CHECK(d == mc.desc(0));
    int fd = -1;
    VIP_BOOLEAN sqe = VIP_FALSE;
    REQUIRE(VipQueryVi(f.p.a, nullptr, nullptr, &sqe, nullptr) == VIP_SUCCESS);
    CHECK(sqe);
    // Every refused destroy can be done now; the rest works as usual.
    CHECK(VipDestroyVi(idle) == VIP_SUCCESS);
    CHECK(VipDestroyCQ(spare_cq) == VIP_SUCCESS);
    CHECK(VipDeregisterMem(f.na.nic, spare_mem.data(), spare_mh) == VIP_SUCCESS);
    CHECK(VipDestroyPtag(f.na.nic, spare_ptag) == VIP_SUCCESS);
    CHECK(VipGetViWaitFd(f.p.b, &fd) == VIP_SUCCESS);
    REQUIRE(VipPostSend(f.p.a, sd, f.ma.mh) == VIP_SUCCESS);
    REQUIRE(VipRecvWait(f.p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d->CS.Length == 100);
    REQUIRE(VipSendWait(f.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(g_notified == 0);
    CHECK(vt::thread_count() == threads_before);
    vt::destroy_vi(q.a);
    vt::destroy_vi(q.b);
    CHECK(VipDestroyCQ(full_cq) == VIP_SUCCESS);
}

TEST_CASE("Every VIPL function called from a handler interrupting a wait is refused at once",
          "[threads][signals][reentry]") {
    int status = vt::run_fresh("every function refused (fresh process)", {}, 60);
    INFO(vt::status_text(status));
    CHECK(status == 0);
}

TEST_CASE("VipProviderInfo and VipConfigInfo from a handler interrupting a wait are refused",
          "[threads][signals][reentry]") {
    vt::ScopedHandler h(kSig, on_signal, false);
    Fixture f;
    vt::set_desc(f.ma.desc(0), f.abuf(0), 4096, f.ma.mh);
    REQUIRE(VipPostRecv(f.p.a, f.ma.desc(0), f.ma.mh) == VIP_SUCCESS);
    VIP_PROVIDER_INFO pinfo;
    VIP_CONFIG_INFO cinfo;
    poison(pinfo);
    poison(cinfo);
    VIP_RETURN rc_provider = VIP_NOT_DONE, rc_config = VIP_NOT_DONE;
    // The configuration is loaded once, under std::call_once: a handler that
    // interrupted that load and read it again could only deadlock.
    std::function<void()> body = [&] {
        rc_provider = VipProviderInfo(0, &pinfo);
        rc_config = VipConfigInfo(0, &cinfo);
    };
    g_body = &body;
    g_runs = 0;
    {
        VIP_DESCRIPTOR *d = nullptr;
        vt::Call c([&] { return VipRecvWait(f.p.a, 10000, &d); });
        REQUIRE(c.asleep());
        c.signal(kSig);
        CHECK(c.finished(3000));
        CHECK(c.join() == VIP_INTERRUPTED);
    }
    g_body = nullptr;
    REQUIRE(g_runs == 1);
    CHECK(rc_provider == VIP_ERROR_REENTERED);
    CHECK(rc_config == VIP_ERROR_REENTERED);
    CHECK(poisoned(pinfo));
    CHECK(poisoned(cinfo));
    CHECK(VipProviderInfo(0, &pinfo) == VIP_SUCCESS);
    CHECK(VipConfigInfo(0, &cinfo) == VIP_SUCCESS);
}

namespace {

std::atomic<int> g_in_vipl{0};
std::atomic<int> g_outside_ok{0}, g_outside_bad{0}, g_inside_refused{0}, g_inside_ok{0}, g_other{0};
VIP_VI_HANDLE g_query_vi = nullptr;

// Interrupts whatever the thread does: inside VIPL the query must be refused
// (and not deadlock on a lock the thread holds); outside it must work.
void on_signal_query(int, siginfo_t *, void *) {
    int inside = g_in_vipl.load();
    VIP_VI_STATE st;
    VIP_RETURN rc = VipQueryVi(g_query_vi, &st, nullptr, nullptr, nullptr);
    if (rc == VIP_ERROR_REENTERED)
        ++(inside ? g_inside_refused : g_outside_bad);
    else if (rc == VIP_SUCCESS)
        ++(inside ? g_inside_ok : g_outside_ok);
    else
        ++g_other;
}

} // namespace

TEST_CASE("Handlers interrupting any VIPL call never deadlock and are refused only inside VIPL",
          "[threads][signals][reentry]") {
    vt::ScopedHandler h(kSig, on_signal_query, false);
    Fixture f;
    g_query_vi = f.p.a;
    g_in_vipl = 0;
    g_outside_ok = g_outside_bad = g_inside_refused = g_inside_ok = g_other = 0;
    std::atomic<bool> stop{false};
    std::atomic<long> rounds{0};
    vt::Notes notes;
    // The signalled thread exchanges messages as fast as it can, marking
    // when it is inside the library.
    std::thread worker([&] {
        uint8_t scratch[2048];
        auto in = [&](auto fn) {
            g_in_vipl = 1;
            VIP_RETURN rc = fn();
            g_in_vipl = 0;
            return rc;
        };
        for (int i = 0; i < 4; ++i) {
            vt::set_desc(f.mb.desc(i), f.bbuf(i), 4096, f.mb.mh);
            in([&] { return VipPostRecv(f.p.b, f.mb.desc(i), f.mb.mh); });
        }
        while (!stop) {
            int i = static_cast<int>(rounds % 4);
            uint32_t len = rounds % 2 ? 64 : 1000;
            vt::set_desc(f.ma.desc(i), f.abuf(i), len, f.ma.mh);
            VIP_DESCRIPTOR *d = nullptr;
            const double end = vt::now_ms() + 5000;
            // Calls fn until it is no longer VIP_NOT_DONE (bounded).  Waiting
            // for its send, the thread also calls VipSendDone on b (which
            // sends nothing: VIP_NOT_DONE): on tcp b's acknowledgement of the
            // 1000-byte sends goes out inside b's calls (doc/semantics.md).
            auto until_done = [&](auto fn, bool drive_b) {
                VIP_RETURN r;
                VIP_DESCRIPTOR *none;
                while ((r = in(fn)) == VIP_NOT_DONE && vt::now_ms() < end)
                    if (drive_b && in([&] { return VipSendDone(f.p.b, &none); }) != VIP_NOT_DONE)
                        return VIP_ERROR_RESOURCE;
                return r;
            };
            const char *step = "VipPostSend";
            VIP_RETURN rc = in([&] { return VipPostSend(f.p.a, f.ma.desc(i), f.ma.mh); });
            if (rc == VIP_SUCCESS) {
                step = "VipRecvDone";
                rc = until_done([&] { return VipRecvDone(f.p.b, &d); }, false);
            }
            if (rc == VIP_SUCCESS) {
                step = "VipPostRecv";
                vt::set_desc(d, d->DS[0].Local.Data.Address, 4096, f.mb.mh);
                rc = in([&] { return VipPostRecv(f.p.b, d, f.mb.mh); });
            }
            if (rc == VIP_SUCCESS) {
                step = "VipSendDone";
                rc = until_done([&] { return VipSendDone(f.p.a, &d); }, true);
            }
            VIP_VI_STATE st;
            if (rc == VIP_SUCCESS) {
                step = "VipQueryVi";
                rc = in([&] { return VipQueryVi(f.p.b, &st, nullptr, nullptr, nullptr); });
            }
            if (rc != VIP_SUCCESS) {
                notes.add(vt::fmt("round %ld: %s %s", long(rounds), step, VipReturnString(rc)));
                break;
            }
            // Some work of its own between calls, where handlers must be served.
            vt::fill_pattern(scratch, sizeof scratch, static_cast<uint32_t>(rounds));
            ++rounds;
        }
    });
    // Signals sent while one is pending merge with it: keep going until both
    // kinds of moment were hit (bounded).
    const int kSignals = 20000;
    double storm_end = vt::now_ms() + 10000;
    for (int i = 0;
         vt::now_ms() < storm_end && (i < kSignals || g_inside_refused == 0 || g_outside_ok == 0);
         ++i) {
        pthread_kill(worker.native_handle(), kSig);
        if (i % 16 == 0) vt::sleep_ms(0.05);
    }
    // The worker keeps going after the storm: nothing was left locked.
    long r0 = rounds;
    double end = vt::now_ms() + 5000;
    while (rounds < r0 + 100 && vt::now_ms() < end) vt::sleep_ms(1);
    stop = true;
    worker.join();
    INFO(notes.text());
    INFO(rounds << " rounds; inside VIPL " << g_inside_refused << " refused, " << g_inside_ok
                << " served; outside " << g_outside_ok << " served, " << g_outside_bad
                << " refused; " << g_other << " other");
    CHECK(notes.size() == 0);
    CHECK(rounds >= r0 + 100);
    CHECK(g_outside_bad == 0);
    CHECK(g_other == 0);
    CHECK(g_inside_refused > 0);
    CHECK(g_outside_ok > 0);
}
