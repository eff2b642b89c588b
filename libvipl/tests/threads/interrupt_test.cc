// Blocking calls and signal handlers: a handler that runs while a call sleeps
// ends it with VIP_INTERRUPTED whatever SA_RESTART says, nothing completed is
// lost, a handler that runs during the spin before sleeping does not end it,
// and with VIPL_SPIN_US=0 every handler that interrupts the sleep counts.
#include "thr_util.h"

#include <atomic>
#include <cstring>
#include <ctime>
#include <random>
#include <sys/wait.h>
#include <thread>

namespace {

constexpr int kSig = SIGUSR2;

std::atomic<int> g_runs{0}; // handler runs
std::atomic<int> g_hits{0}; // runs that found the thread asleep in a system call
std::atomic<int> g_phase{0};

void count(void *uc) {
    ++g_runs;
    if (vt::interrupted_syscall(uc)) ++g_hits;
}

void on_signal(int, siginfo_t *, void *uc) {
    count(uc);
}

// Keeps the interrupted thread in the handler until a helper thread has made
// the awaited thing happen (phase 2), so that it is there when the call
// resumes.  Bounded: a helper that never comes is a failure seen elsewhere.
void on_signal_hold(int, siginfo_t *, void *uc) {
    count(uc);
    g_phase = 1;
    timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (g_phase.load() != 2) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 5) break;
    }
}

void reset() {
    g_runs = 0;
    g_hits = 0;
    g_phase = 0;
}

// Waits (bounded) for the handler to ask for the awaited thing.
bool handler_waiting() {
    double end = vt::now_ms() + 5000;
    while (g_phase.load() != 1 && vt::now_ms() < end) vt::sleep_ms(0.1);
    return g_phase.load() == 1;
}

// A connected pair whose receiving side (a) also reports to a CQ.
struct Fixture {
    vt::Nic na{vt::device()}, nb{vt::device()};
    vt::Memory ma{na, 1 << 20}, mb{nb, 1 << 20};
    VIP_CQ_HANDLE cq = nullptr;
    vt::Pair p;
    Fixture() {
        REQUIRE(VipCreateCQ(na.nic, 16, &cq) == VIP_SUCCESS);
        p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, cq);
    }
    ~Fixture() {
        vt::destroy_vi(p.a);
        vt::destroy_vi(p.b);
        VipDestroyCQ(cq);
    }
    static uint8_t *buf(vt::Memory &m, int i) { return m.base + 65536 + i * 131072; }
    void post_recv(VIP_VI_HANDLE vi, vt::Memory &m, int i) {
        vt::set_desc(m.desc(i), buf(m, i), 131072, m.mh);
        REQUIRE(VipPostRecv(vi, m.desc(i), m.mh) == VIP_SUCCESS);
    }
    void post_send(VIP_VI_HANDLE vi, vt::Memory &m, int i, uint32_t len, uint32_t seq) {
        vt::fill_msg(buf(m, i), len, 7, seq);
        vt::set_desc(m.desc(i), buf(m, i), len, m.mh);
        REQUIRE(VipPostSend(vi, m.desc(i), m.mh) == VIP_SUCCESS);
    }
    // Posts a message b -> a (onto receive i of a) and takes b's completion.
    void message_to_a(int i, uint32_t seq) {
        post_send(p.b, mb, i, 64, seq);
        VIP_DESCRIPTOR *d;
        REQUIRE(VipSendWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
    }
    bool holds(vt::Memory &m, int i, uint32_t seq) {
        uint32_t sender = 0, got = 0;
        return vt::check_msg(buf(m, i), m.desc(i)->CS.Length, &sender, &got) && got == seq;
    }
    // Takes the CQ entries a's receives left (none may be left otherwise).
    int drain_cq() {
        int n = 0;
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN recv;
        while (VipCQDone(cq, &vi, &recv) == VIP_SUCCESS) ++n;
        return n;
    }
};

// Signals a sleeping call once and checks it ended with VIP_INTERRUPTED soon after.
void interrupt_once(vt::Call &c) {
    REQUIRE(c.asleep());
    reset();
    double t0 = vt::now_ms();
    c.signal(kSig);
    bool ended = c.finished(3000);
    VIP_RETURN rc = c.join();
    INFO("returned " << VipReturnString(rc) << " " << (vt::now_ms() - t0)
                     << " ms after the signal");
    CHECK(ended);
    CHECK(rc == VIP_INTERRUPTED);
    CHECK(g_runs == 1);
    // The handler saw the thread asleep in the kernel (checks the detector
    // the signal-storm test relies on).
    if (vt::interrupted_syscall_known()) CHECK(g_hits == 1);
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

VIP_VI_HANDLE new_vi(const vt::Nic &n) {
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi = nullptr;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    return vi;
}

// Waits for and accepts connection requests on disc until one is accepted;
// requests whose client gave up are refused by VipConnectAccept (VIP_TIMEOUT).
struct Server {
    VIP_RETURN last = VIP_NOT_DONE;
    int gave_up = 0;
    std::thread thread;
    Server(VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, std::vector<uint8_t> local) {
        thread = std::thread([this, nic, vi, local]() mutable {
            double end = vt::now_ms() + 10000;
            while (vt::now_ms() < end) {
                vt::AddressBuffer remote;
                VIP_VI_ATTRIBUTES ra;
                VIP_CONN_HANDLE conn;
                last = VipConnectWait(nic, as_addr(local), 5000, remote.get(), &ra, &conn);
                if (last != VIP_SUCCESS) continue;
                last = VipConnectAccept(conn, vi);
                if (last == VIP_SUCCESS) return;
                ++gave_up;
            }
        });
    }
    VIP_RETURN join() {
        thread.join();
        return last;
    }
};

} // namespace

TEST_CASE("VipRecvWait and VipCQWait return VIP_INTERRUPTED and lose nothing",
          "[threads][signals]") {
    bool restart = GENERATE(false, true);
    INFO((restart ? "SA_RESTART" : "no SA_RESTART"));
    vt::ScopedHandler h(kSig, on_signal, restart);
    Fixture f;
    f.post_recv(f.p.a, f.ma, 0);
    {
        VIP_DESCRIPTOR *d = nullptr;
        vt::Call c([&] { return VipRecvWait(f.p.a, 10000, &d); });
        interrupt_once(c);
    }
    {
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN recv;
        vt::Call c([&] { return VipCQWait(f.cq, 10000, &vi, &recv); });
        interrupt_once(c);
    }
    // The receive posted before the interruptions completes as usual.
    f.message_to_a(0, 41);
    VIP_VI_HANDLE vi = nullptr;
    VIP_BOOLEAN recv = VIP_FALSE;
    REQUIRE(VipCQWait(f.cq, vt::kWaitMs, &vi, &recv) == VIP_SUCCESS);
    CHECK((vi == f.p.a && recv));
    VIP_DESCRIPTOR *d = nullptr;
    REQUIRE(VipRecvWait(f.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d == f.ma.desc(0));
    CHECK(f.holds(f.ma, 0, 41));
    CHECK(f.drain_cq() == 0);
}

TEST_CASE("VipSendWait returns VIP_INTERRUPTED and the send still completes",
          "[threads][signals]") {
    bool restart = GENERATE(false, true);
    INFO((restart ? "SA_RESTART" : "no SA_RESTART"));
    vt::ScopedHandler h(kSig, on_signal, restart);
    Fixture f;
    // A large send completes only once the receiver has read it, and nobody
    // drives the receiver yet: the sender sleeps.
    f.post_recv(f.p.b, f.mb, 0);
    f.post_send(f.p.a, f.ma, 0, 100000, 42);
    {
        VIP_DESCRIPTOR *d = nullptr;
        vt::Call c([&] { return VipSendWait(f.p.a, 10000, &d); });
        interrupt_once(c);
    }
    VIP_DESCRIPTOR *d = nullptr;
    REQUIRE(VipRecvWait(f.p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(f.holds(f.mb, 0, 42));
    REQUIRE(VipSendWait(f.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d == f.ma.desc(0));
}

TEST_CASE("VipConnectWait returns VIP_INTERRUPTED and the next one takes the request",
          "[threads][signals][connect]") {
    bool restart = GENERATE(false, true);
    INFO((restart ? "SA_RESTART" : "no SA_RESTART"));
    vt::ScopedHandler h(kSig, on_signal, restart);
    vt::Nic ns(vt::device()), nc(vt::device());
    std::string disc = vt::unique_disc("-cw");
    std::vector<uint8_t> local = addr(ns.nic, disc);
    {
        vt::AddressBuffer remote;
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        vt::Call c([&] {
            return VipConnectWait(ns.nic, as_addr(local), 10000, remote.get(), &ra, &conn);
        });
        interrupt_once(c);
    }
    VIP_VI_HANDLE sv = new_vi(ns), cv = new_vi(nc);
    Server server(ns.nic, sv, local);
    std::vector<uint8_t> me = addr(nc.nic, disc + "c"), target = addr(nc.nic, disc);
    CHECK(vt::connect_request(cv, as_addr(me), as_addr(target), 10000) == VIP_SUCCESS);
    CHECK(server.join() == VIP_SUCCESS);
    CHECK(server.gave_up == 0);
    CHECK(vt::vi_state(sv) == VIP_STATE_CONNECTED);
    CHECK(vt::vi_state(cv) == VIP_STATE_CONNECTED);
    vt::destroy_vi(cv);
    vt::destroy_vi(sv);
}

TEST_CASE("VipConnectRequest returns VIP_INTERRUPTED, leaves the VI Idle, and can be made again",
          "[threads][signals][connect]") {
    bool restart = GENERATE(false, true);
    INFO((restart ? "SA_RESTART" : "no SA_RESTART"));
    vt::ScopedHandler h(kSig, on_signal, restart);
    vt::Nic ns(vt::device()), nc(vt::device());
    std::string disc = vt::unique_disc("-cr");
    std::vector<uint8_t> local = addr(ns.nic, disc);
    // The server listens (requests queue up) but does not answer yet.
    {
        vt::AddressBuffer remote;
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        REQUIRE(VipConnectWait(ns.nic, as_addr(local), 0, remote.get(), &ra, &conn) == VIP_TIMEOUT);
    }
    VIP_VI_HANDLE sv = new_vi(ns), cv = new_vi(nc);
    std::vector<uint8_t> me = addr(nc.nic, disc + "c"), target = addr(nc.nic, disc);
    {
        VIP_VI_ATTRIBUTES ra;
        vt::Call c([&] { return VipConnectRequest(cv, as_addr(me), as_addr(target), 10000, &ra); });
        interrupt_once(c);
    }
    CHECK(vt::vi_state(cv) == VIP_STATE_IDLE);
    // The abandoned request may still reach the server, which then finds its
    // client gone; the next request connects.
    Server server(ns.nic, sv, local);
    CHECK(vt::connect_request(cv, as_addr(me), as_addr(target), 10000) == VIP_SUCCESS);
    CHECK(server.join() == VIP_SUCCESS);
    CHECK(server.gave_up <= 1);
    CHECK(vt::vi_state(sv) == VIP_STATE_CONNECTED);
    CHECK(vt::vi_state(cv) == VIP_STATE_CONNECTED);
    vt::destroy_vi(cv);
    vt::destroy_vi(sv);
}

TEST_CASE("VipConnectPeerWait returns VIP_INTERRUPTED and connects when called again",
          "[threads][signals][connect]") {
    bool restart = GENERATE(false, true);
    // Both roles: the larger discriminator listens, the smaller connects.
    const char *mine = GENERATE("a", "z");
    INFO((restart ? "SA_RESTART" : "no SA_RESTART") << ", discriminator " << mine);
    vt::ScopedHandler h(kSig, on_signal, restart);
    vt::Nic n1(vt::device()), n2(vt::device());
    std::string disc = vt::unique_disc("-pw");
    VIP_VI_HANDLE v1 = new_vi(n1), v2 = new_vi(n2);
    std::vector<uint8_t> l1 = addr(n1.nic, disc + mine), r1 = addr(n1.nic, disc + "m");
    std::vector<uint8_t> l2 = addr(n2.nic, disc + "m"), r2 = addr(n2.nic, disc + mine);
    REQUIRE(VipConnectPeerRequest(v1, as_addr(l1), as_addr(r1), 10000) == VIP_SUCCESS);
    {
        VIP_VI_ATTRIBUTES ra;
        vt::Call c([&] { return VipConnectPeerWait(v1, &ra); });
        interrupt_once(c);
    }
    CHECK(vt::vi_state(v1) == VIP_STATE_CONNECT_PENDING);
    // The mirror request arrives now; waiting again finishes the connection.
    vt::Call other([&] {
        VIP_VI_ATTRIBUTES ra;
        VIP_RETURN rc = VipConnectPeerRequest(v2, as_addr(l2), as_addr(r2), 10000);
        return rc == VIP_SUCCESS ? VipConnectPeerWait(v2, &ra) : rc;
    });
    VIP_VI_ATTRIBUTES ra;
    CHECK(VipConnectPeerWait(v1, &ra) == VIP_SUCCESS);
    CHECK(other.join() == VIP_SUCCESS);
    CHECK(vt::vi_state(v1) == VIP_STATE_CONNECTED);
    CHECK(vt::vi_state(v2) == VIP_STATE_CONNECTED);
    vt::destroy_vi(v1);
    vt::destroy_vi(v2);
}

// ------------------------------------------- completions during the handler

TEST_CASE("A receive that completes while the handler runs: VIP_INTERRUPTED, then the next call "
          "returns it",
          "[threads][signals][completion]") {
    bool via_cq = GENERATE(false, true);
    INFO((via_cq ? "VipCQWait" : "VipRecvWait"));
    vt::ScopedHandler h(kSig, on_signal_hold, false);
    Fixture f;
    f.post_recv(f.p.a, f.ma, 0);
    VIP_DESCRIPTOR *d = nullptr;
    VIP_VI_HANDLE vi = nullptr;
    VIP_BOOLEAN recv = VIP_FALSE;
    vt::Call c([&] {
        return via_cq ? VipCQWait(f.cq, 10000, &vi, &recv) : VipRecvWait(f.p.a, 10000, &d);
    });
    REQUIRE(c.asleep());
    reset();
    c.signal(kSig);
    REQUIRE(handler_waiting());
    // The message is in the receiver's ring before the handler returns.
    f.message_to_a(0, 43);
    g_phase = 2;
    VIP_RETURN rc = c.join();
    INFO("the interrupted call returned " << VipReturnString(rc));
    CHECK(rc == VIP_INTERRUPTED);
    // Nothing is lost: the next call returns the receive (and its CQ entry).
    if (via_cq && rc == VIP_INTERRUPTED) {
        REQUIRE(VipCQWait(f.cq, vt::kWaitMs, &vi, &recv) == VIP_SUCCESS);
        CHECK((vi == f.p.a && recv));
    }
    if (via_cq || rc == VIP_INTERRUPTED) {
        REQUIRE(VipRecvWait(f.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(d == f.ma.desc(0));
    }
    CHECK(f.holds(f.ma, 0, 43));
    CHECK(VipRecvDone(f.p.a, &d) == VIP_NOT_DONE);
    if (!via_cq) f.drain_cq();
}

TEST_CASE("A send that completes while the handler runs: VIP_INTERRUPTED, then the next call "
          "returns it",
          "[threads][signals][completion]") {
    vt::ScopedHandler h(kSig, on_signal_hold, false);
    Fixture f;
    f.post_recv(f.p.b, f.mb, 0);
    f.post_send(f.p.a, f.ma, 0, 100000, 44);
    VIP_DESCRIPTOR *d = nullptr;
    vt::Call c([&] { return VipSendWait(f.p.a, 10000, &d); });
    REQUIRE(c.asleep());
    reset();
    c.signal(kSig);
    REQUIRE(handler_waiting());
    // The receiver reads the data, which completes the send.
    VIP_DESCRIPTOR *rd = nullptr;
    REQUIRE(VipRecvWait(f.p.b, vt::kWaitMs, &rd) == VIP_SUCCESS);
    g_phase = 2;
    VIP_RETURN rc = c.join();
    INFO("the interrupted call returned " << VipReturnString(rc));
    CHECK(rc == VIP_INTERRUPTED);
    if (rc == VIP_INTERRUPTED) {
        REQUIRE(VipSendWait(f.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(d == f.ma.desc(0));
    }
    CHECK(VipSendDone(f.p.a, &d) == VIP_NOT_DONE);
    CHECK(f.holds(f.mb, 0, 44));
}

TEST_CASE("A connection request that arrives while the handler runs is taken by the next "
          "VipConnectWait",
          "[threads][signals][completion][connect]") {
    vt::ScopedHandler h(kSig, on_signal_hold, false);
    vt::Nic ns(vt::device()), nc(vt::device());
    std::string disc = vt::unique_disc("-cwc");
    std::vector<uint8_t> local = addr(ns.nic, disc);
    VIP_VI_HANDLE sv = new_vi(ns), cv = new_vi(nc);
    std::vector<uint8_t> me = addr(nc.nic, disc + "c"), target = addr(nc.nic, disc);
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn = nullptr;
    vt::Call c(
        [&] { return VipConnectWait(ns.nic, as_addr(local), 10000, remote.get(), &ra, &conn); });
    REQUIRE(c.asleep());
    reset();
    c.signal(kSig);
    REQUIRE(handler_waiting());
    // The client's request is queued (the client sleeps awaiting the answer)
    // before the handler returns.
    vt::Call client([&] { return vt::connect_request(cv, as_addr(me), as_addr(target), 10000); });
    CHECK(client.asleep());
    g_phase = 2;
    VIP_RETURN rc = c.join();
    CHECK(rc == VIP_INTERRUPTED);
    if (rc == VIP_INTERRUPTED)
        REQUIRE(VipConnectWait(ns.nic, as_addr(local), vt::kWaitMs, remote.get(), &ra, &conn) ==
                VIP_SUCCESS);
    CHECK(remote.discriminator() == disc + "c");
    CHECK(VipConnectAccept(conn, sv) == VIP_SUCCESS);
    CHECK(client.join() == VIP_SUCCESS);
    CHECK(vt::vi_state(sv) == VIP_STATE_CONNECTED);
    CHECK(vt::vi_state(cv) == VIP_STATE_CONNECTED);
    vt::destroy_vi(cv);
    vt::destroy_vi(sv);
}

TEST_CASE("A connection accepted while the client's handler runs: both sides agree",
          "[threads][signals][completion][connect]") {
    vt::ScopedHandler h(kSig, on_signal_hold, false);
    vt::Nic ns(vt::device()), nc(vt::device());
    std::string disc = vt::unique_disc("-cra");
    std::vector<uint8_t> local = addr(ns.nic, disc);
    VIP_VI_HANDLE sv = new_vi(ns), cv = new_vi(nc);
    std::vector<uint8_t> me = addr(nc.nic, disc + "c"), target = addr(nc.nic, disc);
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn = nullptr;
    REQUIRE(VipConnectWait(ns.nic, as_addr(local), 0, remote.get(), &ra, &conn) == VIP_TIMEOUT);
    vt::Call client(
        [&] { return VipConnectRequest(cv, as_addr(me), as_addr(target), 10000, &ra); });
    REQUIRE(VipConnectWait(ns.nic, as_addr(local), vt::kWaitMs, remote.get(), &ra, &conn) ==
            VIP_SUCCESS);
    REQUIRE(client.asleep());
    reset();
    client.signal(kSig);
    REQUIRE(handler_waiting());
    // The server answers while the client is in its handler, and then waits
    // for the client's acknowledgement.
    vt::Call accept([&] { return VipConnectAccept(conn, sv); });
    CHECK(accept.asleep());
    g_phase = 2;
    VIP_RETURN rc_client = client.join(), rc_server = accept.join();
    INFO("client " << VipReturnString(rc_client) << ", server " << VipReturnString(rc_server));
    // Either both connected, or the client gave up (VIP_INTERRUPTED) and the
    // server saw that (VIP_TIMEOUT): never one side connected alone.
    if (rc_client == VIP_SUCCESS) {
        CHECK(rc_server == VIP_SUCCESS);
    } else {
        CHECK(rc_client == VIP_INTERRUPTED);
        CHECK(rc_server == VIP_TIMEOUT);
    }
    CHECK(vt::vi_state(cv) == (rc_client == VIP_SUCCESS ? VIP_STATE_CONNECTED : VIP_STATE_IDLE));
    CHECK(vt::vi_state(sv) == (rc_server == VIP_SUCCESS ? VIP_STATE_CONNECTED : VIP_STATE_IDLE));
    if (rc_client != VIP_SUCCESS) {
        Server server(ns.nic, sv, local);
        CHECK(vt::connect_request(cv, as_addr(me), as_addr(target), 10000) == VIP_SUCCESS);
        CHECK(server.join() == VIP_SUCCESS);
    }
    vt::destroy_vi(cv);
    vt::destroy_vi(sv);
}

// ------------------------------------------------------------- the spin

TEST_CASE("spin (fresh process)", "[.][threads-spin]") {
    // VIPL_SPIN_US=1000000: a wait spins a whole second before it sleeps.
    REQUIRE(vt::config_value("SPIN_US") == "1000000");
    vt::ScopedHandler h(kSig, on_signal, false);
    Fixture f;
    f.post_recv(f.p.a, f.ma, 0);
    f.post_recv(f.p.a, f.ma, 1);
    VIP_VI_COUNTERS before{}, after{};
    REQUIRE(VipQueryViCounters(f.p.a, &before) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d = nullptr;
    // The waiter has a CPU of its own: an answer that comes after another
    // thread ran on its CPU would not count as a win of the spin.
    vt::pin_cpu(0);
    {
        vt::Call c([&] {
            vt::pin_cpu(1);
            return VipRecvWait(f.p.a, 10000, &d);
        });
        c.thread_id();
        vt::sleep_ms(100);
        // Spinning in user space, not asleep.
        CHECK(vt::blocked_syscall(c.thread_id()) == -1);
        reset();
        c.signal(kSig);
        vt::sleep_ms(100);
        CHECK(g_runs == 1);
        CHECK(g_hits == 0);
        CHECK_FALSE(c.done());
        f.message_to_a(0, 45);
        CHECK(c.finished(3000));
        CHECK(c.join() == VIP_SUCCESS);
        CHECK(d == f.ma.desc(0));
        CHECK(f.holds(f.ma, 0, 45));
    }
    REQUIRE(VipQueryViCounters(f.p.a, &after) == VIP_SUCCESS);
    CHECK(after.Sleeps == before.Sleeps);
    CHECK(after.SpinWins == before.SpinWins + 1);
    // Once the spin is over the call sleeps, and a handler ends it.
    {
        vt::Call c([&] { return VipRecvWait(f.p.a, 10000, &d); });
        CHECK(c.asleep(5000));
        CHECK_FALSE(c.done());
        reset();
        c.signal(kSig);
        CHECK(c.finished(3000));
        CHECK(c.join() == VIP_INTERRUPTED);
        // The whole budget, or half of it: on a busy machine a yield of the first
        // spin may have run another process, and the policy counted that a miss.
        CHECK(c.ms() >= 480);
    }
    f.drain_cq();
}

TEST_CASE("A handler that runs during the spin before sleeping does not end the call",
          "[threads][signals]") {
    int status = vt::run_fresh("spin (fresh process)",
                               {"VIPL_SPIN_US=1000000", "VIPL_SPIN_CONTENDED=0"}, 60);
    INFO(vt::status_text(status));
    CHECK(status == 0);
}

// ------------------------------------------------ every interruption counts

TEST_CASE("every interruption (fresh process)", "[.][threads-every]") {
    REQUIRE(vt::config_value("SPIN_US") == "0");
    REQUIRE(vt::interrupted_syscall_known());
    bool restart = vt::env_long("VIPL_TEST_RESTART", 0) != 0;
    vt::ScopedHandler h(kSig, on_signal, restart);
    Fixture f;
    f.post_recv(f.p.a, f.ma, 0);
    // A pending large send keeps SendWait asleep too.
    f.post_recv(f.p.b, f.mb, 0);
    f.post_send(f.p.a, f.ma, 1, 100000, 46);
    struct Tally {
        int calls = 0, interrupted = 0, mismatched = 0, other = 0;
    };
    Tally tally[3];
    std::atomic<bool> stop{false};
    std::atomic<int> calls_hit{0};
    // One thread waits over and over (each kind in turn); only its own
    // handler runs count for it.
    std::thread waiter([&] {
        for (unsigned n = 0; !stop; ++n) {
            int kind = n % 3;
            VIP_DESCRIPTOR *d = nullptr;
            VIP_VI_HANDLE vi;
            VIP_BOOLEAN recv;
            int hits0 = g_hits;
            VIP_RETURN rc = kind == 0   ? VipRecvWait(f.p.a, 2000, &d)
                            : kind == 1 ? VipCQWait(f.cq, 2000, &vi, &recv)
                                        : VipSendWait(f.p.a, 2000, &d);
            bool hit = g_hits != hits0;
            Tally &t = tally[kind];
            ++t.calls;
            if (rc == VIP_INTERRUPTED) ++t.interrupted;
            if (hit) ++calls_hit;
            if (rc != VIP_INTERRUPTED && rc != VIP_TIMEOUT) ++t.other;
            // Interrupted while asleep <=> VIP_INTERRUPTED.
            if (hit != (rc == VIP_INTERRUPTED)) ++t.mismatched;
        }
    });
    vt::sleep_ms(50);
    reset();
    std::mt19937 rng(7);
    const int kSignals = 300;
    for (int i = 0; i < kSignals; ++i) {
        vt::sleep_ms(0.3 + (rng() % 1000) / 1000.0);
        pthread_kill(waiter.native_handle(), kSig);
    }
    vt::sleep_ms(50);
    stop = true;
    pthread_kill(waiter.native_handle(), kSig);
    waiter.join();
    const char *names[] = {"VipRecvWait", "VipCQWait", "VipSendWait"};
    int interrupted = 0;
    for (int k = 0; k < 3; ++k) {
        INFO(names[k] << ": " << tally[k].calls << " calls, " << tally[k].interrupted
                      << " interrupted");
        CHECK(tally[k].mismatched == 0);
        CHECK(tally[k].other == 0);
        CHECK(tally[k].interrupted > 0);
        interrupted += tally[k].interrupted;
    }
    // With no spin the thread is asleep nearly all the time: nearly every
    // handler run ends a call (a few land between two calls).  A signal sent
    // while the previous one is still pending merges with it.
    INFO(g_runs << " handler runs, " << g_hits << " found the thread asleep, " << interrupted
                << " calls interrupted");
    CHECK(g_runs > kSignals / 2);
    CHECK(interrupted >= g_runs * 9 / 10);
    // Nothing was lost meanwhile.
    VIP_DESCRIPTOR *d = nullptr;
    f.message_to_a(0, 47);
    REQUIRE(VipRecvWait(f.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(f.holds(f.ma, 0, 47));
    REQUIRE(VipRecvWait(f.p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
    REQUIRE(VipSendWait(f.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d == f.ma.desc(1));
    f.drain_cq();
}

TEST_CASE("With VIPL_SPIN_US=0 every handler that interrupts a wait ends it",
          "[threads][signals]") {
    for (const char *restart : {"0", "1"}) {
        INFO("SA_RESTART " << restart);
        int status =
            vt::run_fresh("every interruption (fresh process)",
                          {"VIPL_SPIN_US=0", std::string("VIPL_TEST_RESTART=") + restart}, 60);
        INFO(vt::status_text(status));
        CHECK(status == 0);
    }
}
