// The library starts no thread of its own, except exactly one notification
// thread once a program registers an error callback or a Notify handler.
// Counted in a forked child (one thread at start), against an echo server in
// another process so that no test thread is needed to connect.
#include "procs.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <poll.h>
#include <unistd.h>

namespace {

constexpr uint32_t kMsg = 96 * 1024; // above half the ring (64 KiB): SEND-GET
constexpr int kEchoRecvs = 16;

// Accepts up to kMaxConn connections on disc (one NIC) and sends every
// message back.  Runs until its parent kills it.
constexpr int kMaxConn = 3;

int echo_server(const std::string &disc) {
    vt::Ep ep;
    const size_t per_vi = kEchoRecvs * kMsg;
    if (!ep.open(64 * 1024 + kMaxConn * per_vi)) return 1;
    std::vector<uint8_t> local = vt::address(ep.nic, disc);
    std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 128);
    VIP_VI_ATTRIBUTES attrs;
    if (VipQueryVi(ep.vi, nullptr, &attrs, nullptr, nullptr) != VIP_SUCCESS) return 2;
    std::vector<VIP_VI_HANDLE> live;
    VIP_VI_HANDLE spare = ep.vi;
    ep.vi = nullptr; // this function owns the VIs; closing the NIC destroys them
    auto prepare = [&](VIP_VI_HANDLE vi, int k) {
        for (int i = 0; i < kEchoRecvs; ++i) {
            VIP_DESCRIPTOR *d = ep.desc(k * 32 + i);
            vt::set_desc(d, ep.mem + 64 * 1024 + k * per_vi + i * kMsg, kMsg, ep.mh);
            VipPostRecv(vi, d, ep.mh);
        }
    };
    prepare(spare, 0);
    double end = vt::now_ms() + 30000;
    while (vt::now_ms() < end) {
        if (spare) {
            VIP_VI_ATTRIBUTES ra;
            VIP_CONN_HANDLE conn;
            VIP_RETURN rc = VipConnectWait(
                ep.nic, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()), live.empty() ? 10000 : 0,
                reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), &ra, &conn);
            if (rc == VIP_SUCCESS && VipConnectAccept(conn, spare) == VIP_SUCCESS) {
                live.push_back(spare);
                spare = nullptr;
                if (live.size() < kMaxConn &&
                    VipCreateVi(ep.nic, &attrs, nullptr, nullptr, &spare) == VIP_SUCCESS)
                    prepare(spare, static_cast<int>(live.size()));
            } else if (live.empty()) {
                return 3;
            }
        }
        for (size_t k = 0; k < live.size(); ++k) {
            VIP_DESCRIPTOR *d;
            if (VipRecvWait(live[k], 1, &d) != VIP_SUCCESS) continue;
            VIP_DESCRIPTOR *s = ep.desc(k * 32 + kEchoRecvs);
            vt::set_desc(s, d->DS[0].Local.Data.Address, d->CS.Length, ep.mh);
            if (VipPostSend(live[k], s, ep.mh) == VIP_SUCCESS) VipSendWait(live[k], 5000, &s);
            vt::set_desc(d, d->DS[0].Local.Data.Address, kMsg, ep.mh);
            VipPostRecv(live[k], d, ep.mh);
        }
    }
    return 0;
}

struct Notes {
    std::atomic<int> recv{0}, send{0}, cq{0}, errors{0};
    std::atomic<bool> rearm{true};
    VIP_MEM_HANDLE mh = 0;
};

void on_recv(VIP_PVOID ctx, VIP_NIC_HANDLE, VIP_VI_HANDLE vi, VIP_DESCRIPTOR *d) {
    auto *n = static_cast<Notes *>(ctx);
    vt::set_desc(d, d->DS[0].Local.Data.Address, kMsg, n->mh);
    VipPostRecv(vi, d, n->mh);
    // Registering again from the handler is allowed and must not add a thread.
    if (n->rearm) VipRecvNotify(vi, ctx, on_recv);
    ++n->recv;
}

void on_send(VIP_PVOID ctx, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *) {
    ++static_cast<Notes *>(ctx)->send;
}

void on_cq(VIP_PVOID ctx, VIP_NIC_HANDLE, VIP_VI_HANDLE vi, VIP_BOOLEAN recv) {
    auto *n = static_cast<Notes *>(ctx);
    VIP_DESCRIPTOR *d = nullptr;
    if (recv && VipRecvDone(vi, &d) == VIP_SUCCESS) {
        vt::set_desc(d, d->DS[0].Local.Data.Address, kMsg, n->mh);
        VipPostRecv(vi, d, n->mh);
    } else if (!recv) {
        VipSendDone(vi, &d);
    }
    ++n->cq;
}

void on_error(VIP_PVOID ctx, VIP_ERROR_DESCRIPTOR *) {
    ++static_cast<Notes *>(ctx)->errors;
}

struct Client {
    vt::Ep ep;
    uint32_t seed = 1;
    void open(bool cqs) {
        vt::Opts o;
        o.send_cq = o.recv_cq = cqs;
        EP_REQUIRE(ep, ep.open(64 * 1024 + 8 * kMsg, o));
        for (int i = 0; i < 4; ++i) {
            vt::set_desc(ep.desc(i), rbuf(i), kMsg, ep.mh);
            EP_REQUIRE(ep, ep.post_recv(ep.desc(i)));
        }
    }
    uint8_t *rbuf(int i) { return ep.mem + 64 * 1024 + i * kMsg; }
    uint8_t *sbuf() { return ep.mem + 64 * 1024 + 4 * kMsg; }
    VIP_DESCRIPTOR *sdesc() { return ep.desc(8); }
    void post_message(uint32_t len) {
        vt::fill_pattern(sbuf(), len, ++seed);
        vt::set_desc(sdesc(), sbuf(), len, ep.mh);
        EP_REQUIRE(ep, ep.post_send(sdesc()));
    }
    void check_echo(VIP_DESCRIPTOR *d, uint32_t len) {
        REQUIRE(d->CS.Length == len);
        REQUIRE(vt::check_pattern(static_cast<uint8_t *>(d->DS[0].Local.Data.Address), len, seed));
        vt::set_desc(d, d->DS[0].Local.Data.Address, kMsg, ep.mh);
        EP_REQUIRE(ep, ep.post_recv(d));
    }
    // One round trip taken with Wait calls.
    void round_trip(uint32_t len) {
        post_message(len);
        EP_REQUIRE(ep, ep.wait_send(sdesc()));
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipRecvWait(ep.vi, 5000, &d) == VIP_SUCCESS);
        check_echo(d, len);
    }
    // One round trip taken with Done calls only.  (Blocking waits on a VI the
    // notification thread watches are covered by the doorbell tests.)
    void round_trip_polled(uint32_t len) {
        post_message(len);
        VIP_DESCRIPTOR *d = nullptr;
        double end = vt::now_ms() + 5000;
        VIP_RETURN rc;
        while ((rc = VipSendDone(ep.vi, &d)) == VIP_NOT_DONE && vt::now_ms() < end) {
        }
        REQUIRE(rc == VIP_SUCCESS);
        while ((rc = VipRecvDone(ep.vi, &d)) == VIP_NOT_DONE && vt::now_ms() < end) {
        }
        REQUIRE(rc == VIP_SUCCESS);
        check_echo(d, len);
    }
    // One round trip taken through the CQs.
    void round_trip_cq(uint32_t len) {
        post_message(len);
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN recv;
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipCQWait(ep.scq, 5000, &vi, &recv) == VIP_SUCCESS);
        REQUIRE((vi == ep.vi && !recv));
        REQUIRE(VipSendDone(ep.vi, &d) == VIP_SUCCESS);
        REQUIRE(VipCQWait(ep.rcq, 5000, &vi, &recv) == VIP_SUCCESS);
        REQUIRE((vi == ep.vi && recv));
        REQUIRE(VipRecvDone(ep.vi, &d) == VIP_SUCCESS);
        check_echo(d, len);
    }
};

template <class F>
bool eventually(F f, int ms = 5000) {
    double end = vt::now_ms() + ms;
    while (!f()) {
        if (vt::now_ms() > end) return false;
        vt::sleep_ms(0.2);
    }
    return true;
}

enum class First { error_callback, recv_notify, cq_notify };

int count_threads(First first) {
    std::string disc = vt::unique_disc("n");
    vt::Child server(vt::spawn_child([&] { return echo_server(disc); }));
    const int base = vt::thread_count();
    REQUIRE(base == 1);

    Client a, b;
    a.open(false);
    b.open(true);
    CHECK(vt::thread_count() == base);
    EP_REQUIRE(a.ep, a.ep.connect(disc));
    EP_REQUIRE(b.ep, b.ep.connect(disc));
    CHECK(vt::thread_count() == base);
    for (uint32_t len : {16u, kMsg}) {
        a.round_trip(len);
        b.round_trip_cq(len);
    }
    int fd = -1;
    REQUIRE(VipGetViWaitFd(a.ep.vi, &fd) == VIP_SUCCESS);
    REQUIRE(VipGetCQWaitFd(b.ep.rcq, &fd) == VIP_SUCCESS);
    a.round_trip(100);
    b.round_trip_cq(100);
    VIP_VI_COUNTERS counters;
    REQUIRE(VipQueryViCounters(a.ep.vi, &counters) == VIP_SUCCESS);
    CHECK(counters.GetSends > 0);
    INFO("after opening, connecting, transferring, CQs and wait fds");
    REQUIRE(vt::thread_count() == base);

    Notes notes;
    notes.mh = a.ep.mh;
    Notes cq_notes;
    cq_notes.mh = b.ep.mh;
    switch (first) {
    case First::error_callback:
        REQUIRE(VipErrorCallback(a.ep.nic, &notes, on_error) == VIP_SUCCESS);
        break;
    case First::recv_notify:
        REQUIRE(VipRecvNotify(a.ep.vi, &notes, on_recv) == VIP_SUCCESS);
        break;
    case First::cq_notify:
        REQUIRE(VipCQNotify(b.ep.rcq, &cq_notes, on_cq) == VIP_SUCCESS);
        break;
    }
    INFO("after the first registration");
    REQUIRE(vt::thread_count() == base + 1);

    // Whatever comes next, no second thread.
    auto one_more = [&](const char *what) {
        INFO(what);
        CHECK(vt::thread_count() == base + 1);
    };
    REQUIRE(VipErrorCallback(a.ep.nic, &notes, on_error) == VIP_SUCCESS);
    REQUIRE(VipErrorCallback(b.ep.nic, &notes, on_error) == VIP_SUCCESS);
    one_more("error callbacks on both NICs");
    REQUIRE(VipErrorCallback(a.ep.nic, nullptr, nullptr) == VIP_SUCCESS);
    REQUIRE(VipErrorCallback(a.ep.nic, &notes, on_error) == VIP_SUCCESS);
    one_more("error callback removed and set again");
    if (first != First::recv_notify)
        REQUIRE(VipRecvNotify(a.ep.vi, &notes, on_recv) == VIP_SUCCESS);
    REQUIRE(VipSendNotify(a.ep.vi, &notes, on_send) == VIP_SUCCESS);
    one_more("Send and Recv Notify");
    for (int i = 0; i < 5; ++i) {
        int before = notes.recv;
        a.post_message(i % 2 ? kMsg : 32);
        REQUIRE(eventually([&] { return notes.recv > before; }));
        if (i == 0)
            REQUIRE(eventually([&] { return notes.send > 0; }));
        else {
            VIP_DESCRIPTOR *d = nullptr;
            REQUIRE(eventually([&] { return VipSendDone(a.ep.vi, &d) == VIP_SUCCESS; }));
        }
        one_more("handlers that ran and registered again");
    }
    notes.rearm = false;
    a.post_message(64);
    REQUIRE(eventually([&] { return notes.recv == 6; }));
    {
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(eventually([&] { return VipSendDone(a.ep.vi, &d) == VIP_SUCCESS; }));
    }
    if (first != First::cq_notify) REQUIRE(VipCQNotify(b.ep.rcq, &cq_notes, on_cq) == VIP_SUCCESS);
    REQUIRE(VipCQNotify(b.ep.scq, &cq_notes, on_cq) == VIP_SUCCESS);
    one_more("CQ Notify on both CQs");
    b.post_message(kMsg);
    REQUIRE(eventually([&] { return cq_notes.cq >= 2; }));
    one_more("CQ handlers that ran");

    // A connection made while the thread runs is watched by the same thread.
    Client c;
    c.open(false);
    EP_REQUIRE(c.ep, c.ep.connect(disc));
    c.round_trip_polled(kMsg);
    REQUIRE(VipErrorCallback(c.ep.nic, &notes, on_error) == VIP_SUCCESS);
    one_more("a third NIC, connected and with its own error callback");
    CHECK(notes.errors == 0);

    server.kill_now();
    server.wait(5);
    REQUIRE(eventually([&] { return notes.errors >= 3; }));
    one_more("errors reported on three VIs");
    a.ep.close();
    b.ep.close();
    c.ep.close();
    CHECK(vt::thread_count() <= base + 1);
    return 0;
}

void run(First first) {
    int status = vt::run_checked([&] { return count_threads(first); }, 60);
    INFO("child " << vt::status_text(status));
    REQUIRE(status == 0);
}

} // namespace

TEST_CASE("threads: none until a handler is registered and then exactly one", "[shm][threads]") {
    SECTION("error callback first") {
        run(First::error_callback);
    }
    SECTION("receive Notify first") {
        run(First::recv_notify);
    }
    SECTION("CQ Notify first") {
        run(First::cq_notify);
    }
}
