// A signal storm: SIGALRM every 100 us in two processes that exchange
// messages through sleeping waits.  Every message arrives exactly once and in
// order, and a wait ends with VIP_INTERRUPTED exactly when a handler ran
// while it slept (the handler tells from the registers it interrupted).  One
// process installs its handler with SA_RESTART, the other without.  Then the
// same for connection set-up: requests and accepts retried on
// VIP_INTERRUPTED always end in a working connection on both sides.
#include "thr_util.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr int kWindow = 16;     // messages in flight
constexpr uint32_t kBuf = 4096; // largest message
constexpr int kStormUs = 100;
// Before the last message and before its acknowledgement the sender pauses,
// so that the other side's wait for it sleeps under the storm: a fast
// exchange may otherwise end every wait while it spins, and the checks that
// a wait ends with VIP_INTERRUPTED exactly when a handler ran while it
// slept would have nothing to check.
constexpr double kPauseMs = 20;

volatile sig_atomic_t g_in_wait = 0;
volatile sig_atomic_t g_hit = 0;
std::atomic<long> g_signals{0};

void on_alarm(int, siginfo_t *, void *uc) {
    ++g_signals;
    if (g_in_wait && vt::interrupted_syscall(uc)) g_hit = 1;
}

void storm(bool on) {
    itimerval it{};
    if (on) it.it_interval.tv_usec = it.it_value.tv_usec = kStormUs;
    setitimer(ITIMER_REAL, &it, nullptr);
}

// How the waits of one kind went.
struct WaitStats {
    long calls = 0, interrupted = 0, slept_and_hit = 0;
    long hit_not_interrupted = 0; // a handler interrupted the sleep, the call went on
    long interrupted_not_hit = 0; // VIP_INTERRUPTED without a handler during the sleep
    long other = 0;               // neither success nor interruption
    VIP_RETURN first_other = VIP_SUCCESS;

    template <class F>
    VIP_RETURN run(F fn) {
        g_hit = 0;
        g_in_wait = 1;
        VIP_RETURN rc = fn();
        g_in_wait = 0;
        bool hit = g_hit;
        ++calls;
        slept_and_hit += hit;
        if (rc == VIP_INTERRUPTED) ++interrupted;
        if (hit && rc != VIP_INTERRUPTED) ++hit_not_interrupted;
        if (!hit && rc == VIP_INTERRUPTED) ++interrupted_not_hit;
        if (rc != VIP_SUCCESS && rc != VIP_INTERRUPTED && !other++) first_other = rc;
        return rc;
    }
    std::string text(const char *name) const {
        return vt::fmt("%s: %ld calls, %ld interrupted, %ld interrupted asleep but went on, %ld "
                       "VIP_INTERRUPTED without, %ld other (first %s)",
                       name, calls, interrupted, hit_not_interrupted, interrupted_not_hit, other,
                       VipReturnString(first_other));
    }
};

void check_waits(const WaitStats &w, const char *name) {
    INFO(w.text(name));
    CHECK(w.other == 0);
    CHECK(w.hit_not_interrupted == 0);
    CHECK(w.interrupted_not_hit == 0);
}

uint32_t msg_size(long seq) {
    static const uint32_t sizes[] = {64, 700, 16, kBuf}; // ring copies and SEND-GET
    return sizes[seq % 4];
}

// One side: a NIC (its own, or one that outlives it), memory for kWindow
// receives and kWindow sends, a VI.
struct Side {
    std::unique_ptr<vt::Nic> own;
    vt::Nic &nic;
    vt::Memory mem{nic, 2 * kWindow *(64 + kBuf)};
    VIP_CQ_HANDLE rcq = nullptr;
    VIP_VI_HANDLE vi = nullptr;
    explicit Side(bool recv_cq, vt::Nic *shared = nullptr)
        : own(shared ? nullptr : std::make_unique<vt::Nic>(vt::device())),
          nic(shared ? *shared : *own) {
        if (recv_cq) REQUIRE(VipCreateCQ(nic.nic, 4 * kWindow, &rcq) == VIP_SUCCESS);
        VIP_VI_ATTRIBUTES va = vt::vi_attrs(nic);
        REQUIRE(VipCreateVi(nic.nic, &va, nullptr, rcq, &vi) == VIP_SUCCESS);
        for (int i = 0; i < kWindow; ++i) REQUIRE(post_recv(rdesc(i)) == VIP_SUCCESS);
    }
    ~Side() {
        vt::destroy_vi(vi);
        if (rcq) VipDestroyCQ(rcq);
    }
    VIP_DESCRIPTOR *rdesc(int i) { return mem.desc(i); }
    VIP_DESCRIPTOR *sdesc(int i) { return mem.desc(kWindow + i); }
    uint8_t *rbuf(int i) { return mem.base + 2 * kWindow * 64 + i * kBuf; }
    uint8_t *sbuf(int i) { return mem.base + 2 * kWindow * 64 + (kWindow + i) * kBuf; }
    VIP_RETURN post_recv(VIP_DESCRIPTOR *d) {
        long i = d - rdesc(0);
        vt::set_desc(d, rbuf(static_cast<int>(i)), kBuf, mem.mh);
        return VipPostRecv(vi, d, mem.mh);
    }
    VIP_RETURN post_send(int slot, uint32_t sender, long seq, uint32_t len) {
        vt::fill_msg(sbuf(slot), len, sender, static_cast<uint32_t>(seq));
        vt::set_desc(sdesc(slot), sbuf(slot), len, mem.mh);
        return VipPostSend(vi, sdesc(slot), mem.mh);
    }
    // The sequence number of a received message from `sender`, -1 if it is not one.
    long message(VIP_DESCRIPTOR *d, uint32_t sender) {
        long i = d - rdesc(0);
        uint32_t from = 0, seq = 0;
        if (i < 0 || i >= kWindow || (d->CS.Status & VIP_STATUS_ERROR_MASK) ||
            !vt::check_msg(rbuf(static_cast<int>(i)), d->CS.Length, &from, &seq) || from != sender)
            return -1;
        return seq;
    }
};

void write_stats(const std::string &text) {
    std::string path = vt::env_str("VIPL_TEST_STATS");
    if (path.empty()) return;
    std::ofstream out(path);
    out << text << "\n";
}

// Sends completed in order: takes them until at most `keep` are outstanding.
bool reap(Side &s, WaitStats &w, long &posted, long &completed, long keep, double end) {
    while (posted - completed > keep && vt::now_ms() < end) {
        VIP_DESCRIPTOR *d = nullptr;
        VIP_RETURN rc = w.run([&] { return VipSendWait(s.vi, 5000, &d); });
        if (rc == VIP_INTERRUPTED) continue;
        if (rc != VIP_SUCCESS || d != s.sdesc(static_cast<int>(completed % kWindow))) return false;
        ++completed;
    }
    return posted - completed <= keep;
}

} // namespace

// The receiving side: takes messages through a CQ, checks their order,
// acknowledges each (which returns the sender a credit).
TEST_CASE("storm server (fresh process)", "[.][threads-storm-server]") {
    const long n = vt::env_long("VIPL_TEST_COUNT", 0);
    const bool restart = vt::env_long("VIPL_TEST_RESTART", 0) != 0;
    const std::string disc = vt::env_str("VIPL_TEST_DISC");
    REQUIRE(n > 0);
    REQUIRE(vt::interrupted_syscall_known());
    Side s(true);
    {
        vt::Address local(s.nic.nic, disc);
        vt::AddressBuffer remote;
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        REQUIRE(VipConnectWait(s.nic.nic, local.get(), 20000, remote.get(), &ra, &conn) ==
                VIP_SUCCESS);
        REQUIRE(VipConnectAccept(conn, s.vi) == VIP_SUCCESS);
    }
    vt::ScopedHandler h(SIGALRM, on_alarm, restart);
    WaitStats cqw, sendw, recvw;
    long next = 0, out_of_order = 0, bad = 0, posted = 0, completed = 0;
    const double t0 = vt::now_ms(), end = t0 + 50000;
    storm(true);
    // n messages, then the client's final one (seq n), each acknowledged.
    while (next <= n && vt::now_ms() < end) {
        VIP_VI_HANDLE vi = nullptr;
        VIP_BOOLEAN recv = VIP_FALSE;
        VIP_RETURN rc = cqw.run([&] { return VipCQWait(s.rcq, 5000, &vi, &recv); });
        if (rc == VIP_INTERRUPTED) continue;
        if (rc != VIP_SUCCESS) break;
        VIP_DESCRIPTOR *d = nullptr;
        if (vi != s.vi || !recv || VipRecvDone(s.vi, &d) != VIP_SUCCESS) {
            ++bad;
            break;
        }
        long seq = s.message(d, 1);
        if (seq < 0) {
            ++bad;
            break;
        }
        if (seq != next) ++out_of_order;
        next = seq + 1;
        if (s.post_recv(d) != VIP_SUCCESS) {
            ++bad;
            break;
        }
        if (!reap(s, sendw, posted, completed, kWindow - 1, end)) {
            ++bad;
            break;
        }
        if (seq == n) vt::sleep_ms(kPauseMs);
        if (s.post_send(static_cast<int>(posted % kWindow), 2, seq, 16) != VIP_SUCCESS) {
            ++bad;
            break;
        }
        ++posted;
    }
    bool reaped = reap(s, sendw, posted, completed, 0, end);
    // The client hangs up last; wait for it (its disconnect ends our connection).
    VIP_DESCRIPTOR *d = nullptr;
    VIP_RETURN last = VIP_INTERRUPTED;
    while (last == VIP_INTERRUPTED && vt::now_ms() < end)
        last = recvw.run([&] { return VipRecvWait(s.vi, 5000, &d); });
    storm(false);
    double ms = vt::now_ms() - t0;
    std::string stats =
        vt::fmt("server (%s): %ld messages in %.0f ms, %ld signals; ",
                restart ? "SA_RESTART" : "no SA_RESTART", next, ms, long(g_signals)) +
        cqw.text("VipCQWait") + "; " + sendw.text("VipSendWait");
    write_stats(stats);
    INFO(stats);
    CHECK(next == n + 1);
    CHECK(out_of_order == 0);
    CHECK(bad == 0);
    CHECK(reaped);
    CHECK(posted == n + 1);
    // The last receive is flushed when the client disconnects.
    CHECK(last == VIP_DESCRIPTOR_ERROR);
    check_waits(cqw, "VipCQWait");
    check_waits(sendw, "VipSendWait");
    CHECK(cqw.interrupted > 0);
    CHECK(g_signals > 0);
}

// The sending side: keeps kWindow messages in flight, takes the
// acknowledgements in order with VipRecvWait.
TEST_CASE("storm client (fresh process)", "[.][threads-storm-client]") {
    const long n = vt::env_long("VIPL_TEST_COUNT", 0);
    const bool restart = vt::env_long("VIPL_TEST_RESTART", 0) != 0;
    const std::string disc = vt::env_str("VIPL_TEST_DISC");
    REQUIRE(n > 0);
    REQUIRE(vt::interrupted_syscall_known());
    Side s(false);
    {
        vt::Address local(s.nic.nic, disc + "c"), remote(s.nic.nic, disc);
        REQUIRE(vt::connect_request(s.vi, local.get(), remote.get(), 20000) == VIP_SUCCESS);
    }
    vt::ScopedHandler h(SIGALRM, on_alarm, restart);
    WaitStats recvw, sendw;
    long sent = 0, acked = 0, completed = 0, out_of_order = 0, bad = 0;
    const double t0 = vt::now_ms(), end = t0 + 50000;
    storm(true);
    // Messages 0..n-1, then n: the last one, acknowledged like the others.
    while (acked <= n && vt::now_ms() < end) {
        if (sent <= n && sent - acked < kWindow) {
            if (!reap(s, sendw, sent, completed, kWindow - 1, end)) {
                ++bad;
                break;
            }
            if (sent == n) vt::sleep_ms(kPauseMs);
            if (s.post_send(static_cast<int>(sent % kWindow), 1, sent, msg_size(sent)) !=
                VIP_SUCCESS) {
                ++bad;
                break;
            }
            ++sent;
            continue;
        }
        VIP_DESCRIPTOR *d = nullptr;
        VIP_RETURN rc = recvw.run([&] { return VipRecvWait(s.vi, 5000, &d); });
        if (rc == VIP_INTERRUPTED) continue;
        long seq = rc == VIP_SUCCESS ? s.message(d, 2) : -1;
        if (seq < 0 || s.post_recv(d) != VIP_SUCCESS) {
            ++bad;
            break;
        }
        if (seq != acked) ++out_of_order;
        acked = seq + 1;
    }
    bool reaped = reap(s, sendw, sent, completed, 0, end);
    storm(false);
    double ms = vt::now_ms() - t0;
    std::string stats =
        vt::fmt("client (%s): %ld messages in %.0f ms, %ld signals; ",
                restart ? "SA_RESTART" : "no SA_RESTART", sent, ms, long(g_signals)) +
        recvw.text("VipRecvWait") + "; " + sendw.text("VipSendWait");
    write_stats(stats);
    INFO(stats);
    CHECK(sent == n + 1);
    CHECK(acked == n + 1);
    CHECK(out_of_order == 0);
    CHECK(bad == 0);
    CHECK(reaped);
    check_waits(recvw, "VipRecvWait");
    check_waits(sendw, "VipSendWait");
    CHECK(recvw.interrupted > 0);
    CHECK(VipDisconnect(s.vi) == VIP_SUCCESS);
}

namespace {

std::string read_file(const std::string &path) {
    std::ifstream in(path);
    std::string s, line;
    while (std::getline(in, line)) s += line;
    unlink(path.c_str());
    return s;
}

// Runs a server and a client fresh process against each other.
void run_pair(const char *server, const char *client, std::vector<std::string> env, int timeout_s,
              double *ms) {
    std::string disc = vt::unique_disc("-storm");
    std::string sfile = vt::fmt("/tmp/vipl-storm-%d-s", getpid());
    std::string cfile = vt::fmt("/tmp/vipl-storm-%d-c", getpid());
    env.push_back("VIPL_TEST_DISC=" + disc);
    std::vector<std::string> senv = env, cenv = env;
    senv.push_back("VIPL_TEST_STATS=" + sfile);
    senv.push_back("VIPL_TEST_RESTART=0");
    cenv.push_back("VIPL_TEST_STATS=" + cfile);
    cenv.push_back("VIPL_TEST_RESTART=1");
    double t0 = vt::now_ms();
    int spid = vt::spawn_fresh(server, senv);
    int cpid = vt::spawn_fresh(client, cenv);
    int cstatus = vt::wait_child(cpid, timeout_s);
    int sstatus = vt::wait_child(spid, timeout_s);
    *ms = vt::now_ms() - t0;
    INFO(read_file(sfile));
    INFO(read_file(cfile));
    INFO("server " << vt::status_text(sstatus) << ", client " << vt::status_text(cstatus) << ", "
                   << *ms << " ms");
    CHECK(sstatus == 0);
    CHECK(cstatus == 0);
}

} // namespace

TEST_CASE("Under SIGALRM every 100 us two processes exchange 100,000 messages, each once and in "
          "order",
          "[threads][signals][storm]") {
    double ms = 0;
    // 100,000 messages each way.
    run_pair("storm server (fresh process)", "storm client (fresh process)",
             {"VIPL_TEST_COUNT=100000"}, 120, &ms);
    CHECK(ms < 60000);
}

// ------------------------------------------------------ connections

namespace {

constexpr int kConnections = 40;

// A wait retried on VIP_INTERRUPTED, for up to 5 s in all.
template <class F>
VIP_RETURN retried(WaitStats &w, F fn) {
    double end = vt::now_ms() + 5000;
    VIP_RETURN rc;
    while ((rc = w.run(fn)) == VIP_INTERRUPTED && vt::now_ms() < end) {
    }
    return rc;
}

// The requesting side sends its number and waits for it to come back; the
// accepting side sends back the number it received (*seq).
VIP_RETURN exchange(Side &s, bool requester, long *seq, WaitStats &w, std::string *why) {
    VIP_DESCRIPTOR *d = nullptr;
    VIP_RETURN rc;
    uint32_t me = requester ? 1 : 2, peer = requester ? 2 : 1;
    auto send = [&] {
        if ((rc = s.post_send(0, me, *seq, 64)) != VIP_SUCCESS) return *why = "post", false;
        rc = retried(w, [&] { return VipSendWait(s.vi, 5000, &d); });
        return rc == VIP_SUCCESS || (*why = "send", false);
    };
    if (requester && !send()) return rc;
    rc = retried(w, [&] { return VipRecvWait(s.vi, 5000, &d); });
    if (rc != VIP_SUCCESS) return *why = "receive", rc;
    long got = s.message(d, peer);
    if (got < 0 || (requester && got != *seq)) return *why = "message", VIP_DESCRIPTOR_ERROR;
    *seq = got;
    if ((rc = s.post_recv(d)) != VIP_SUCCESS) return *why = "repost", rc;
    if (!requester && !send()) return rc;
    return VIP_SUCCESS;
}

} // namespace

TEST_CASE("storm accept (fresh process)", "[.][threads-storm-accept]") {
    const std::string disc = vt::env_str("VIPL_TEST_DISC");
    REQUIRE(vt::interrupted_syscall_known());
    vt::ScopedHandler h(SIGALRM, on_alarm, vt::env_long("VIPL_TEST_RESTART", 0) != 0);
    // One NIC serves the discriminator throughout: requests queue on it
    // between waits, and closing it would drop those (the client would see
    // VIP_REJECT).  A fresh VI and memory on it for each connection.
    vt::Nic nic(vt::device());
    vt::Address local(nic.nic, disc);
    WaitStats connw, dataw;
    int accepted = 0, gave_up = 0, broken = 0;
    vt::Notes notes;
    const double end = vt::now_ms() + 50000;
    storm(true);
    auto s = std::make_unique<Side>(false, &nic);
    // A client that believes it connected when we did not stops sending
    // requests before we have all of them: give up after 5 s without one.
    double last_request = vt::now_ms();
    while (accepted < kConnections && vt::now_ms() < end) {
        vt::AddressBuffer remote;
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        VIP_RETURN rc = connw.run([&] {
            return VipConnectWait(s->nic.nic, local.get(), 5000, remote.get(), &ra, &conn);
        });
        if (rc == VIP_INTERRUPTED && vt::now_ms() - last_request < 5000) continue;
        if (rc == VIP_SUCCESS) last_request = vt::now_ms();
        if (rc != VIP_SUCCESS) {
            notes.add(rc == VIP_INTERRUPTED
                          ? vt::fmt("no request for 5 s after %d connections", accepted)
                          : vt::fmt("VipConnectWait: %s", VipReturnString(rc)));
            break;
        }
        rc = VipConnectAccept(conn, s->vi);
        if (rc == VIP_TIMEOUT) { // the client gave up (its request was interrupted)
            ++gave_up;
            continue;
        }
        if (rc != VIP_SUCCESS) {
            notes.add(vt::fmt("VipConnectAccept: %s", VipReturnString(rc)));
            break;
        }
        ++accepted;
        std::string why;
        long seq = -1;
        rc = exchange(*s, false, &seq, dataw, &why);
        if (rc != VIP_SUCCESS) {
            ++broken;
            notes.add(vt::fmt("accepted connection %d (the client's %ld), then %s: %s (state %d)",
                              accepted - 1, seq, why.c_str(), VipReturnString(rc),
                              vt::vi_state(s->vi)));
        }
        // The client disconnects first: our last receive is flushed then.
        VIP_DESCRIPTOR *d = nullptr;
        retried(dataw, [&] { return VipRecvWait(s->vi, 5000, &d); });
        s.reset();
        s = std::make_unique<Side>(false, &nic);
    }
    // A run whose requests were all queued before each wait never slept there: one wait
    // with nothing to wait for, under the storm, must see a signal then.
    for (int i = 0; i < 3 && connw.interrupted == 0; ++i) {
        vt::AddressBuffer remote;
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        VIP_RETURN rc = connw.run(
            [&] { return VipConnectWait(s->nic.nic, local.get(), 200, remote.get(), &ra, &conn); });
        if (rc == VIP_SUCCESS) VipConnectReject(conn);
    }
    storm(false);
    std::string stats =
        vt::fmt("accepting side: %d connections, %d requests whose client gave up, %ld signals; ",
                accepted, gave_up, long(g_signals)) +
        connw.text("VipConnectWait");
    write_stats(stats);
    INFO(stats);
    INFO(notes.text());
    CHECK(notes.size() == 0);
    CHECK(accepted == kConnections);
    CHECK(broken == 0);
    CHECK(connw.hit_not_interrupted == 0);
    CHECK(connw.interrupted_not_hit == 0);
    CHECK(connw.interrupted > 0);
}

TEST_CASE("storm request (fresh process)", "[.][threads-storm-request]") {
    const std::string disc = vt::env_str("VIPL_TEST_DISC");
    REQUIRE(vt::interrupted_syscall_known());
    vt::ScopedHandler h(SIGALRM, on_alarm, vt::env_long("VIPL_TEST_RESTART", 0) != 0);
    WaitStats connw, dataw;
    int connected = 0, interrupted = 0, no_match = 0;
    vt::Notes notes;
    const double end = vt::now_ms() + 50000;
    storm(true);
    for (int k = 0; k < kConnections && vt::now_ms() < end; ++k) {
        Side s(false);
        vt::Address me(s.nic.nic, disc + "c"), server(s.nic.nic, disc);
        VIP_RETURN rc = VIP_INTERRUPTED;
        while (vt::now_ms() < end) {
            VIP_VI_ATTRIBUTES ra;
            rc = connw.run(
                [&] { return VipConnectRequest(s.vi, me.get(), server.get(), 5000, &ra); });
            if (rc == VIP_SUCCESS) break;
            if (rc == VIP_INTERRUPTED) {
                ++interrupted;
            } else if (rc == VIP_NO_MATCH) {
                ++no_match; // the server is not listening yet
                vt::sleep_ms(1);
            } else {
                // Nobody rejects and the server always answers in time.
                notes.add(vt::fmt("connection %d: VipConnectRequest %s", k, VipReturnString(rc)));
            }
            if (vt::vi_state(s.vi) != VIP_STATE_IDLE)
                notes.add(vt::fmt("connection %d: VipConnectRequest %s left the VI in state %d", k,
                                  VipReturnString(rc), vt::vi_state(s.vi)));
        }
        if (rc != VIP_SUCCESS) break;
        ++connected;
        // A request that succeeded is a connection the server has too.
        std::string why;
        long seq = k;
        rc = exchange(s, true, &seq, dataw, &why);
        if (rc != VIP_SUCCESS)
            notes.add(vt::fmt("connection %d: connected, then %s: %s (state %d)", k, why.c_str(),
                              VipReturnString(rc), vt::vi_state(s.vi)));
        VipDisconnect(s.vi);
    }
    storm(false);
    std::string stats = vt::fmt("requesting side: %d connections, %d requests interrupted, %d "
                                "before the server listened, %ld signals; ",
                                connected, interrupted, no_match, long(g_signals)) +
                        connw.text("VipConnectRequest");
    write_stats(stats);
    INFO(stats);
    INFO(notes.text());
    CHECK(notes.size() == 0);
    CHECK(connected == kConnections);
    CHECK(connw.hit_not_interrupted == 0);
    CHECK(connw.interrupted_not_hit == 0);
}

TEST_CASE("Under SIGALRM every 100 us connections retried on VIP_INTERRUPTED always work on both "
          "sides",
          "[threads][signals][storm][connect]") {
    double ms = 0;
    run_pair("storm accept (fresh process)", "storm request (fresh process)", {}, 90, &ms);
    CHECK(ms < 60000);
}
