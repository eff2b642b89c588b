// Doorbell stress: two processes ping-pong small messages where waits sleep
// and posts must wake the sleeper.  A lost wake-up leaves a waiter asleep
// until its timeout; since a wait that times out still returns a descriptor
// that completed meanwhile, each wait is also timed: while the peer answers
// at once, no wait may take anywhere near a second.
//
// Each side is a fresh process so that each can have its own VIPL_SPIN_US.
#include "procs.h"

#include <atomic>
#include <cstring>
#include <unistd.h>

namespace {

constexpr int kWaitMs = 2000;
constexpr double kLostMs = 1000; // a wait this long while the peer is busy answering

struct Stats {
    std::string err;
    double max_wait_ms = 0;
    double total_ms = 0;
    VIP_VI_COUNTERS c{};
};

std::atomic<int> g_errors{0};
// The peer may exit as soon as the last round is done: a lost connection
// counts only before that.
std::atomic<bool> g_last_round{false};
void on_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR *e) {
    if (e->ErrorCode == VIP_ERROR_CONN_LOST && g_last_round) return;
    ++g_errors;
}

// Waits for the next completion of one queue, through the VI or a CQ.
VIP_RETURN wait_one(vt::Ep &ep, bool recv, bool cq, VIP_DESCRIPTOR **d, double *took) {
    double t0 = vt::now_ms();
    VIP_RETURN rc;
    if (cq) {
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN is_recv;
        rc = VipCQWait(recv ? ep.rcq : ep.scq, kWaitMs, &vi, &is_recv);
        if (rc == VIP_SUCCESS) rc = recv ? VipRecvDone(ep.vi, d) : VipSendDone(ep.vi, d);
    } else {
        rc = recv ? VipRecvWait(ep.vi, kWaitMs, d) : VipSendWait(ep.vi, kWaitMs, d);
    }
    *took = vt::now_ms() - t0;
    return rc;
}

Stats pingpong(int role, const std::string &disc, long rounds, bool cq, bool callback) {
    Stats s;
    vt::Ep ep;
    vt::Opts o;
    o.send_cq = o.recv_cq = cq;
    auto fail = [&](const std::string &what) {
        s.err = vt::fmt("%s: %s", role == 0 ? "server" : "client", what.c_str());
        return s;
    };
    if (!ep.open(64 << 10, o)) return fail(ep.err);
    if (callback && VipErrorCallback(ep.nic, nullptr, on_error) != VIP_SUCCESS)
        return fail("VipErrorCallback");
    uint64_t *rb[2] = {reinterpret_cast<uint64_t *>(ep.mem + 8192),
                       reinterpret_cast<uint64_t *>(ep.mem + 8256)};
    uint64_t *sb = reinterpret_cast<uint64_t *>(ep.mem + 8320);
    for (int i = 0; i < 2; ++i) {
        vt::set_desc(ep.desc(i), rb[i], 8, ep.mh);
        if (!ep.post_recv(ep.desc(i))) return fail(ep.err);
    }
    if (!(role == 0 ? ep.accept(disc) : ep.connect(disc))) return fail(ep.err);
    double start = vt::now_ms();
    auto send = [&](uint64_t v) {
        *sb = v;
        vt::set_desc(ep.desc(2), sb, 8, ep.mh);
        if (!ep.post_send(ep.desc(2))) return false;
        VIP_DESCRIPTOR *d = nullptr;
        double took;
        VIP_RETURN rc = wait_one(ep, false, cq, &d, &took);
        s.max_wait_ms = std::max(s.max_wait_ms, took);
        if (rc != VIP_SUCCESS || d != ep.desc(2))
            return ep.fail(vt::fmt("send %llu: %s", (unsigned long long)v, VipReturnString(rc)));
        return true;
    };
    auto recv = [&](uint64_t want, bool repost) {
        VIP_DESCRIPTOR *d = nullptr;
        double took;
        VIP_RETURN rc = wait_one(ep, true, cq, &d, &took);
        s.max_wait_ms = std::max(s.max_wait_ms, took);
        if (rc != VIP_SUCCESS)
            return ep.fail(vt::fmt("round %llu: %s after %.0f ms", (unsigned long long)want,
                                   VipReturnString(rc), took));
        if (took > kLostMs)
            return ep.fail(vt::fmt(
                "round %llu: the wait slept %.0f ms although the message was there (lost wake-up)",
                (unsigned long long)want, took));
        int i = d == ep.desc(0) ? 0 : 1;
        if (d != ep.desc(i) || *rb[i] != want)
            return ep.fail(vt::fmt("round %llu: got %llu", (unsigned long long)want,
                                   (unsigned long long)*rb[i]));
        return !repost || ep.post_recv(d);
    };
    for (long r = 0; r < rounds; ++r) {
        if (r + 1 == rounds) g_last_round = true;
        // The client's last receive is not reposted: the server may be gone by then.
        bool ok = role == 0 ? recv(r, true) && send(r) : send(r) && recv(r, r + 1 < rounds);
        if (!ok) return fail(ep.err);
    }
    s.total_ms = vt::now_ms() - start;
    s.c = ep.counters();
    if (callback && g_errors != 0) return fail("an asynchronous error was reported");
    return s;
}

struct Run {
    std::string server_spin, client_spin;
    long rounds;
    bool cq = false;
    bool callback = false;
    bool both_sleep = false;
};

void run(const Run &r) {
    std::string disc = vt::unique_disc("d");
    auto env = [&](const char *role, const std::string &spin) {
        return std::vector<std::string>{"VT_FRESH=1",
                                        std::string("VT_ROLE=") + role,
                                        "VT_DISC=" + disc,
                                        "VT_ROUNDS=" + std::to_string(r.rounds),
                                        std::string("VT_CQ=") + (r.cq ? "1" : "0"),
                                        std::string("VT_CALLBACK=") + (r.callback ? "1" : "0"),
                                        std::string("VT_BOTH_SLEEP=") + (r.both_sleep ? "1" : "0"),
                                        "VIPL_SPIN_US=" + spin};
    };
    vt::Child server(vt::spawn_fresh("shm child: pingpong", env("server", r.server_spin)));
    vt::Child client(vt::spawn_fresh("shm child: pingpong", env("client", r.client_spin)));
    int cs = client.wait(100);
    int ss = server.wait(10);
    INFO("server " << vt::status_text(ss) << ", client " << vt::status_text(cs));
    CHECK(ss == 0);
    CHECK(cs == 0);
}

} // namespace

TEST_CASE("shm child: pingpong", "[.]") {
    if (!getenv("VT_FRESH")) return; // started by the cases below only
    std::string role = vt::env_str("VT_ROLE");
    long rounds = vt::env_long("VT_ROUNDS", 1000);
    REQUIRE(vt::config_value("SPIN_US") == vt::env_str("VIPL_SPIN_US"));
    Stats s = pingpong(role == "server" ? 0 : 1, vt::env_str("VT_DISC"), rounds,
                       vt::env_long("VT_CQ", 0) == 1, vt::env_long("VT_CALLBACK", 0) == 1);
    printf("[measure] %s SPIN_US=%s%s%s: %ld round trips in %.0f ms (%.1f us each), longest wait "
           "%.2f ms, "
           "Sleeps %llu DoorbellsRung %llu SpinWins %llu\n",
           role.c_str(), vt::env_str("VIPL_SPIN_US").c_str(), vt::env_long("VT_CQ", 0) ? " CQ" : "",
           vt::env_long("VT_CALLBACK", 0) ? " callback" : "", rounds, s.total_ms,
           s.total_ms * 1000 / rounds, s.max_wait_ms, (unsigned long long)s.c.Sleeps,
           (unsigned long long)s.c.DoorbellsRung, (unsigned long long)s.c.SpinWins);
    INFO(s.err);
    REQUIRE(s.err.empty());
    if (vt::env_long("VT_BOTH_SLEEP", 0)) {
        // Neither side spins: nearly every wait must have slept and been rung awake.
        CHECK(s.c.Sleeps >= static_cast<uint64_t>(rounds / 2));
        CHECK(s.c.DoorbellsRung >= static_cast<uint64_t>(rounds / 2));
        CHECK(s.c.SpinWins == 0);
    }
}

TEST_CASE("doorbells: 100000 round trips with VIPL_SPIN_US=0 lose no wake-up", "[shm][doorbell]") {
    run({"0", "0", 100000, false, false, true});
}

TEST_CASE("doorbells: one side spins while the other sleeps", "[shm][doorbell]") {
    // 100 ms of spinning covers any answer that comes while the peer is awake.
    SECTION("the server spins") {
        run({"100000", "0", 50000});
    }
    SECTION("the client spins") {
        run({"0", "100000", 50000});
    }
}

TEST_CASE("doorbells: sleeping in VipCQWait loses no wake-up", "[shm][doorbell]") {
    run({"0", "0", 20000, true, false});
}

TEST_CASE("doorbells: no wake-up lost while the notification thread watches the VI",
          "[shm][doorbell]") {
    // An error callback makes the library's thread watch every connected VI.
    run({"0", "0", 20000, false, true});
}
