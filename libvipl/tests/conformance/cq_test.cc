// Completion queues: VipCreateCQ, VipDestroyCQ, VipResizeCQ, VipCQDone,
// VipCQWait, VipCQNotify.
#include "support.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

// Sends one message of `len` bytes on vi from slot `slot` of m.
void send(VIP_VI_HANDLE vi, vt::Memory &m, size_t slot, uint32_t len, uint8_t fill) {
    uint8_t *buf = m.base + 65536 + 1024 * slot;
    memset(buf, fill, len);
    vt::set_desc(m.desc(slot), buf, len, m.mh);
    REQUIRE(VipPostSend(vi, m.desc(slot), m.mh) == VIP_SUCCESS);
}

void post_recvs(VIP_VI_HANDLE vi, vt::Memory &m, size_t first, size_t count) {
    for (size_t i = first; i < first + count; ++i) {
        vt::set_desc(m.desc(i), m.base + 65536 + 1024 * i, 1024, m.mh);
        REQUIRE(VipPostRecv(vi, m.desc(i), m.mh) == VIP_SUCCESS);
    }
}

} // namespace

TEST_CASE("VipCreateCQ checks its arguments", "[cq][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_CQ_HANDLE cq = reinterpret_cast<VIP_CQ_HANDLE>(0x99);
    CHECK(VipCreateCQ(n.nic, 0, &cq) == VIP_INVALID_PARAMETER);
    CHECK(VipCreateCQ(n.nic, n.attrs.MaxCQEntries + 1, &cq) == VIP_INVALID_PARAMETER);
    CHECK(VipCreateCQ(n.nic, 4, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipCreateCQ(nullptr, 4, &cq) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles())
        CHECK(VipCreateCQ(h, 4, &cq) == VIP_INVALID_PARAMETER);
    CHECK(VipCreateCQ(n.ptag, 4, &cq) == VIP_INVALID_PARAMETER);
    CHECK(cq == reinterpret_cast<VIP_CQ_HANDLE>(0x99));
    VIP_CQ_HANDLE a, b;
    REQUIRE(VipCreateCQ(n.nic, 1, &a) == VIP_SUCCESS);
    REQUIRE(VipCreateCQ(n.nic, 1, &b) == VIP_SUCCESS);
    CHECK(a != b);
}

TEST_CASE("MaxCQ is enforced", "[cq][attrs][limits]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_ULONG max = n.attrs.MaxCQ;
    if (max > 2000) {
        WARN("MaxCQ " << max << " is too large to exhaust here: not checked");
        return;
    }
    std::vector<VIP_CQ_HANDLE> made;
    VIP_CQ_HANDLE cq;
    while (made.size() < max && VipCreateCQ(n.nic, 1, &cq) == VIP_SUCCESS) made.push_back(cq);
    CHECK(made.size() == max);
    CHECK(VipCreateCQ(n.nic, 1, &cq) == VIP_ERROR_RESOURCE);
}

TEST_CASE("VipDestroyCQ refuses bad handles and CQs in use", "[cq]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    CHECK(VipDestroyCQ(nullptr) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles()) CHECK(VipDestroyCQ(h) == VIP_INVALID_PARAMETER);
    CHECK(VipDestroyCQ(n.nic) == VIP_INVALID_PARAMETER);
    VIP_CQ_HANDLE scq, rcq;
    REQUIRE(VipCreateCQ(n.nic, 8, &scq) == VIP_SUCCESS);
    REQUIRE(VipCreateCQ(n.nic, 8, &rcq) == VIP_SUCCESS);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE v1, v2;
    REQUIRE(VipCreateVi(n.nic, &va, scq, nullptr, &v1) == VIP_SUCCESS);
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, rcq, &v2) == VIP_SUCCESS);
    CHECK(VipDestroyCQ(scq) == VIP_INVALID_STATE);
    CHECK(VipDestroyCQ(rcq) == VIP_INVALID_STATE);
    REQUIRE(VipDestroyVi(v1) == VIP_SUCCESS);
    CHECK(VipDestroyCQ(scq) == VIP_SUCCESS);
    CHECK(VipDestroyCQ(rcq) == VIP_INVALID_STATE);
    REQUIRE(VipDestroyVi(v2) == VIP_SUCCESS);
    CHECK(VipDestroyCQ(rcq) == VIP_SUCCESS);
    CHECK(VipDestroyCQ(rcq) == VIP_INVALID_PARAMETER);
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    CHECK(VipCQDone(scq, &vi, &recv) == VIP_INVALID_PARAMETER);
}

TEST_CASE("VipCQDone, VipCQWait and VipResizeCQ check their arguments", "[cq][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(n.nic, 4, &cq) == VIP_SUCCESS);
    VIP_VI_HANDLE vi = reinterpret_cast<VIP_VI_HANDLE>(0x55);
    VIP_BOOLEAN recv = 7;
    CHECK(VipCQDone(cq, &vi, &recv) == VIP_NOT_DONE);
    auto start = Clock::now();
    CHECK(VipCQWait(cq, 50, &vi, &recv) == VIP_TIMEOUT);
    CHECK(VipCQWait(cq, 0, &vi, &recv) == VIP_TIMEOUT);
    CHECK(Clock::now() - start < std::chrono::seconds(5));
    CHECK(vi == reinterpret_cast<VIP_VI_HANDLE>(0x55));
    CHECK(recv == 7);
    CHECK(VipCQDone(cq, nullptr, &recv) == VIP_INVALID_PARAMETER);
    CHECK(VipCQDone(cq, &vi, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipCQWait(cq, 10, nullptr, &recv) == VIP_INVALID_PARAMETER);
    CHECK(VipCQWait(cq, 10, &vi, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipResizeCQ(cq, 0) == VIP_INVALID_PARAMETER);
    CHECK(VipResizeCQ(cq, n.attrs.MaxCQEntries + 1) == VIP_INVALID_PARAMETER);
    CHECK(VipResizeCQ(cq, 100) == VIP_SUCCESS);
    CHECK(VipResizeCQ(cq, 1) == VIP_SUCCESS);
    std::vector<VIP_PVOID> bad = vt::garbage_handles(100);
    bad.push_back(nullptr);
    bad.push_back(n.nic);
    for (VIP_PVOID h : bad) {
        CHECK(VipCQDone(h, &vi, &recv) == VIP_INVALID_PARAMETER);
        CHECK(VipCQWait(h, 10, &vi, &recv) == VIP_INVALID_PARAMETER);
        CHECK(VipResizeCQ(h, 4) == VIP_INVALID_PARAMETER);
    }
    REQUIRE(VipDestroyCQ(cq) == VIP_SUCCESS);
    CHECK(VipResizeCQ(cq, 4) == VIP_INVALID_PARAMETER);
    CHECK(VipCQWait(cq, 10, &vi, &recv) == VIP_INVALID_PARAMETER);
}

TEST_CASE("Send and receive queues report to their own CQs", "[cq]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 1 << 20), mb(nb, 1 << 20);
    VIP_CQ_HANDLE scq_a, rcq_a, cq_b;
    REQUIRE(VipCreateCQ(na.nic, 16, &scq_a) == VIP_SUCCESS);
    REQUIRE(VipCreateCQ(na.nic, 16, &rcq_a) == VIP_SUCCESS);
    REQUIRE(VipCreateCQ(nb.nic, 16, &cq_b) == VIP_SUCCESS); // both queues of b
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), scq_a, rcq_a, cq_b,
                                  cq_b, [&](VIP_VI_HANDLE a, VIP_VI_HANDLE b) {
                                      post_recvs(a, ma, 0, 3);
                                      post_recvs(b, mb, 0, 3);
                                  });
    for (int i = 0; i < 3; ++i) send(p.b, mb, 10 + i, 100, static_cast<uint8_t>('a' + i));
    for (int i = 0; i < 3; ++i) {
        VIP_VI_HANDLE vi = nullptr;
        VIP_BOOLEAN recv = VIP_FALSE;
        REQUIRE(VipCQWait(rcq_a, vt::kWaitMs, &vi, &recv) == VIP_SUCCESS);
        CHECK(vi == p.a);
        CHECK(recv == VIP_TRUE);
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipRecvDone(p.a, &d) == VIP_SUCCESS);
        CHECK(d == ma.desc(i));
        CHECK(ma.base[65536 + 1024 * i] == 'a' + i);
    }
    // b's sends completed on its shared CQ, marked as send-queue entries.
    for (int i = 0; i < 3; ++i) {
        VIP_VI_HANDLE vi = nullptr;
        VIP_BOOLEAN recv = VIP_TRUE;
        REQUIRE(VipCQWait(cq_b, vt::kWaitMs, &vi, &recv) == VIP_SUCCESS);
        CHECK(vi == p.b);
        CHECK(recv == VIP_FALSE);
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipSendDone(p.b, &d) == VIP_SUCCESS);
        CHECK(d == mb.desc(10 + i));
    }
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    CHECK(VipCQDone(scq_a, &vi, &recv) == VIP_NOT_DONE);
    CHECK(VipCQDone(cq_b, &vi, &recv) == VIP_NOT_DONE);

    // The other direction.
    send(p.a, ma, 20, 50, 'z');
    REQUIRE(VipCQWait(cq_b, vt::kWaitMs, &vi, &recv) == VIP_SUCCESS);
    CHECK(vi == p.b);
    CHECK(recv == VIP_TRUE);
    VIP_DESCRIPTOR *d;
    REQUIRE(VipRecvDone(p.b, &d) == VIP_SUCCESS);
    CHECK(mb.base[65536] == 'z');
    REQUIRE(VipCQWait(scq_a, vt::kWaitMs, &vi, &recv) == VIP_SUCCESS);
    CHECK(vi == p.a);
    CHECK(recv == VIP_FALSE);
    REQUIRE(VipSendDone(p.a, &d) == VIP_SUCCESS);
    CHECK(d == ma.desc(20));
    CHECK(VipCQDone(rcq_a, &vi, &recv) == VIP_NOT_DONE);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("One CQ serves the receive queues of several VIs", "[cq]") {
    std::string device = VT_DEVICE();
    vt::Nic ns(device), nc(device);
    vt::Memory ms(ns, 1 << 20), mc(nc, 1 << 20);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(ns.nic, 64, &cq) == VIP_SUCCESS);
    const int kVis = 4, kMsgs = 5;
    std::vector<vt::Pair> pairs;
    std::map<VIP_VI_HANDLE, int> index;
    for (int v = 0; v < kVis; ++v) {
        pairs.push_back(vt::connect_pair(
            ns, nc, vt::vi_attrs(ns), vt::vi_attrs(nc), nullptr, cq, nullptr, nullptr,
            [&](VIP_VI_HANDLE a, VIP_VI_HANDLE) { post_recvs(a, ms, v * kMsgs, kMsgs); }));
        index[pairs.back().a] = v;
    }
    // Senders interleave: message m of VI v carries v * 16 + m.
    for (int m = 0; m < kMsgs; ++m)
        for (int v = 0; v < kVis; ++v) send(pairs[v].b, mc, v * kMsgs + m, 8, v * 16 + m);
    std::map<int, int> next; // per VI: the next message expected
    for (int k = 0; k < kVis * kMsgs; ++k) {
        VIP_VI_HANDLE vi = nullptr;
        VIP_BOOLEAN recv = VIP_FALSE;
        REQUIRE(VipCQWait(cq, vt::kWaitMs, &vi, &recv) == VIP_SUCCESS);
        REQUIRE(index.count(vi) == 1);
        CHECK(recv == VIP_TRUE);
        int v = index[vi];
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipRecvDone(vi, &d) == VIP_SUCCESS);
        int m = next[v]++;
        CHECK(d == ms.desc(v * kMsgs + m));
        CHECK(static_cast<uint8_t *>(d->DS[0].Local.Data.Address)[0] == v * 16 + m);
    }
    for (int v = 0; v < kVis; ++v) CHECK(next[v] == kMsgs);
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    CHECK(VipCQDone(cq, &vi, &recv) == VIP_NOT_DONE);
    for (auto &p : pairs) {
        VIP_DESCRIPTOR *d;
        for (int m = 0; m < kMsgs; ++m) REQUIRE(VipSendWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
        vt::destroy_vi(p.a);
        vt::destroy_vi(p.b);
    }
    CHECK(VipDestroyCQ(cq) == VIP_SUCCESS);
}

TEST_CASE("A CQ smaller than the completions loses nothing", "[cq]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 1 << 20), mb(nb, 1 << 20);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(na.nic, 2, &cq) == VIP_SUCCESS);
    const int n = 12;
    vt::Pair p =
        vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), cq, cq, nullptr, nullptr,
                         [&](VIP_VI_HANDLE a, VIP_VI_HANDLE) { post_recvs(a, ma, 0, n); });
    for (int i = 0; i < n; ++i) send(p.b, mb, 100 + i, 16, static_cast<uint8_t>(i + 1));
    VIP_DESCRIPTOR *d;
    for (int i = 0; i < n; ++i) REQUIRE(VipSendWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
    // Also a few sends of a's own, sharing the CQ.
    for (int i = 0; i < 3; ++i) send(p.a, ma, 200 + i, 4, 0);
    int recvs = 0, sends = 0;
    auto end = Clock::now() + std::chrono::seconds(10);
    while ((recvs < n || sends < 3) && Clock::now() < end) {
        VIP_VI_HANDLE vi = nullptr;
        VIP_BOOLEAN recv = VIP_FALSE;
        VIP_RETURN rc = VipCQWait(cq, 1000, &vi, &recv);
        if (rc != VIP_SUCCESS) {
            CHECK(rc == VIP_TIMEOUT);
            continue;
        }
        CHECK(vi == p.a);
        if (recv) {
            REQUIRE(VipRecvDone(p.a, &d) == VIP_SUCCESS);
            CHECK(d == ma.desc(recvs));
            CHECK(ma.base[65536 + 1024 * recvs] == recvs + 1);
            CHECK(d->CS.Length == 16);
            ++recvs;
        } else {
            REQUIRE(VipSendDone(p.a, &d) == VIP_SUCCESS);
            CHECK(d == ma.desc(200 + sends));
            ++sends;
        }
    }
    CHECK(recvs == n);
    CHECK(sends == 3);
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    CHECK(VipCQDone(cq, &vi, &recv) == VIP_NOT_DONE);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("VipResizeCQ keeps queued completions and refuses to drop any", "[cq]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 1 << 20), mb(nb, 1 << 20);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(na.nic, 8, &cq) == VIP_SUCCESS);
    vt::Pair p =
        vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, cq, nullptr, nullptr,
                         [&](VIP_VI_HANDLE a, VIP_VI_HANDLE) { post_recvs(a, ma, 0, 6); });
    for (int i = 0; i < 6; ++i) send(p.b, mb, 100 + i, 8, static_cast<uint8_t>(i + 1));
    // Keep a progressing (its send queue is empty, so Done takes nothing)
    // until all six completions are in the CQ: only then is 5 too small.
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    VIP_DESCRIPTOR *d;
    bool six = false;
    auto end = Clock::now() + std::chrono::seconds(5);
    while (!six && Clock::now() < end) {
        CHECK(VipSendDone(p.a, &d) == VIP_NOT_DONE);
        VIP_RETURN rc = VipResizeCQ(cq, 5);
        six = rc == VIP_INVALID_STATE;
        if (!six) REQUIRE(VipResizeCQ(cq, 8) == VIP_SUCCESS);
    }
    REQUIRE(six);
    CHECK(VipResizeCQ(cq, 6) == VIP_SUCCESS);
    CHECK(VipResizeCQ(cq, 5) == VIP_INVALID_STATE);
    CHECK(VipResizeCQ(cq, 1000) == VIP_SUCCESS);
    for (int i = 0; i < 6; ++i) {
        REQUIRE(VipCQDone(cq, &vi, &recv) == VIP_SUCCESS);
        CHECK(vi == p.a);
        CHECK(recv == VIP_TRUE);
        REQUIRE(VipRecvDone(p.a, &d) == VIP_SUCCESS);
        CHECK(d == ma.desc(i));
        CHECK(ma.base[65536 + 1024 * i] == i + 1);
    }
    CHECK(VipCQDone(cq, &vi, &recv) == VIP_NOT_DONE);
    CHECK(VipResizeCQ(cq, 1) == VIP_SUCCESS);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("VipCQWait is woken by a completion that comes later", "[cq]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 1 << 20), mb(nb, 1 << 20);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(na.nic, 8, &cq) == VIP_SUCCESS);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, cq, nullptr,
                                  nullptr, [&](VIP_VI_HANDLE a, VIP_VI_HANDLE) {
                                      for (int k = 0; k < 2; ++k) {
                                          vt::set_desc(ma.desc(k), ma.base + 200000 * (k + 1),
                                                       200000, ma.mh);
                                          REQUIRE(VipPostRecv(a, ma.desc(k), ma.mh) == VIP_SUCCESS);
                                      }
                                  });
    for (uint32_t len : {8u, 100000u}) {
        auto sender = std::async(std::launch::async, [&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            vt::set_desc(mb.desc(50), mb.base + 200000, len, mb.mh);
            VIP_RETURN rc = VipPostSend(p.b, mb.desc(50), mb.mh);
            VIP_DESCRIPTOR *d;
            return rc == VIP_SUCCESS ? VipSendWait(p.b, vt::kWaitMs, &d) : rc;
        });
        VIP_VI_HANDLE vi = nullptr;
        VIP_BOOLEAN recv;
        CHECK(VipCQWait(cq, vt::kWaitMs, &vi, &recv) == VIP_SUCCESS);
        CHECK(vi == p.a);
        CHECK(sender.get() == VIP_SUCCESS);
        VIP_DESCRIPTOR *d;
        CHECK(VipRecvDone(p.a, &d) == VIP_SUCCESS);
    }
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

namespace {

struct CqNotifyLog {
    std::mutex m;
    std::condition_variable cv;
    struct Call {
        VIP_PVOID ctx;
        VIP_NIC_HANDLE nic;
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN recv;
    };
    std::vector<Call> calls;
    static void handler(VIP_PVOID ctx, VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, VIP_BOOLEAN recv) {
        auto *log = static_cast<CqNotifyLog *>(ctx);
        std::lock_guard<std::mutex> g(log->m);
        log->calls.push_back({ctx, nic, vi, recv});
        log->cv.notify_all();
    }
};

} // namespace

TEST_CASE("VipCQNotify hands over one CQ entry", "[cq][notify]") {
    std::string device = VT_DEVICE();
    CqNotifyLog log;
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 1 << 20), mb(nb, 1 << 20);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(na.nic, 8, &cq) == VIP_SUCCESS);
    CHECK(VipCQNotify(cq, &log, nullptr) == VIP_INVALID_PARAMETER);
    std::vector<VIP_PVOID> bad = vt::garbage_handles(50);
    bad.push_back(nullptr);
    bad.push_back(na.nic);
    for (VIP_PVOID h : bad)
        CHECK(VipCQNotify(h, &log, &CqNotifyLog::handler) == VIP_INVALID_PARAMETER);

    vt::Pair p =
        vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, cq, nullptr, nullptr,
                         [&](VIP_VI_HANDLE a, VIP_VI_HANDLE) { post_recvs(a, ma, 0, 2); });
    REQUIRE(VipCQNotify(cq, &log, &CqNotifyLog::handler) == VIP_SUCCESS);
    send(p.b, mb, 10, 30, 'q');
    {
        std::unique_lock<std::mutex> g(log.m);
        REQUIRE(log.cv.wait_for(g, std::chrono::seconds(5), [&] { return !log.calls.empty(); }));
        CHECK(log.calls[0].ctx == &log);
        CHECK(log.calls[0].nic == na.nic);
        CHECK(log.calls[0].vi == p.a);
        CHECK(log.calls[0].recv == VIP_TRUE);
    }
    // The entry was taken by the handler; the descriptor is still on the VI's queue.
    VIP_DESCRIPTOR *d;
    REQUIRE(VipRecvDone(p.a, &d) == VIP_SUCCESS);
    CHECK(d == ma.desc(0));
    // One-shot: the next entry is left for VipCQWait.
    send(p.b, mb, 11, 30, 'r');
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    REQUIRE(VipCQWait(cq, vt::kWaitMs, &vi, &recv) == VIP_SUCCESS);
    CHECK(vi == p.a);
    REQUIRE(VipRecvDone(p.a, &d) == VIP_SUCCESS);
    CHECK(d == ma.desc(1));
    {
        std::lock_guard<std::mutex> g(log.m);
        CHECK(log.calls.size() == 1);
    }
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}
