// Reliability levels: what happens to a message that finds no receive
// descriptor, or one too short, and when a send completes.
#include "support.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

// A sender (s) and a receiver (r), with their NICs' errors recorded.
struct Link {
    vt::ErrorLog serrors, rerrors;
    vt::Nic ns, nr;
    vt::Memory ms, mr;
    vt::Pair p;
    VIP_VI_HANDLE s = nullptr, r = nullptr;
    Link(const std::string &device, VIP_RELIABILITY_LEVEL level)
        : ns(device), nr(device), ms(ns, 4 << 20), mr(nr, 4 << 20) {
        serrors.install(ns.nic);
        rerrors.install(nr.nic);
        p = vt::connect_pair(nr, ns, vt::vi_attrs(nr, level), vt::vi_attrs(ns, level));
        r = p.a;
        s = p.b;
    }
    ~Link() {
        vt::destroy_vi(p.a);
        vt::destroy_vi(p.b);
    }
    void post_recv(size_t slot, uint32_t room) {
        vt::set_desc(mr.desc(slot), mr.base + 65536 + 200000 * slot, room, mr.mh);
        REQUIRE(VipPostRecv(r, mr.desc(slot), mr.mh) == VIP_SUCCESS);
    }
    void send(size_t slot, uint32_t len, uint32_t seed) {
        uint8_t *buf = ms.base + 65536 + 200000 * slot;
        vt::fill_pattern(buf, len, seed);
        vt::set_desc(ms.desc(slot), buf, len, ms.mh);
        REQUIRE(VipPostSend(s, ms.desc(slot), ms.mh) == VIP_SUCCESS);
    }
    bool received(size_t slot, uint32_t len, uint32_t seed) {
        return vt::check_pattern(mr.base + 65536 + 200000 * slot, len, seed);
    }
};

// Gives the receiver time to process what has arrived while it has no
// receive descriptor (the data moves inside its calls).
void let_receiver_progress(VIP_VI_HANDLE r) {
    std::vector<vt::Taken> taken;
    vt::drive_until(
        r, [] { return false; }, 200, &taken);
    CHECK(taken.empty());
}

} // namespace

TEST_CASE("Unreliable: a message without a receive descriptor is dropped", "[reliability]") {
    std::string device = VT_DEVICE();
    for (uint32_t len : {32u, 100000u}) {
        INFO("length " << len);
        Link l(device, VIP_SERVICE_UNRELIABLE);
        l.send(0, len, 1);
        VIP_DESCRIPTOR *d = nullptr;
        {
            vt::Pump pump(l.r);
            CHECK(VipSendWait(l.s, vt::kWaitMs, &d) == VIP_SUCCESS);
            CHECK(d == l.ms.desc(0));
        }
        let_receiver_progress(l.r);
        CHECK(vt::vi_state(l.r) == VIP_STATE_CONNECTED);
        CHECK(vt::vi_state(l.s) == VIP_STATE_CONNECTED);
        // The next message goes into the next receive; the dropped one never shows up.
        l.post_recv(1, 200000);
        l.post_recv(2, 200000);
        l.send(1, len, 2);
        REQUIRE(VipRecvWait(l.r, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(d == l.mr.desc(1));
        CHECK(d->CS.Length == len);
        CHECK(l.received(1, len, 2));
        CHECK(VipRecvWait(l.r, 50, &d) == VIP_TIMEOUT);
        REQUIRE(VipSendWait(l.s, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(l.rerrors.all().empty());
        CHECK(l.serrors.all().empty());
    }
}

TEST_CASE("Unreliable: a message too long for its receive descriptor is dropped", "[reliability]") {
    std::string device = VT_DEVICE();
    uint32_t len = GENERATE(101u, 100000u);
    INFO("length " << len);
    Link l(device, VIP_SERVICE_UNRELIABLE);
    l.post_recv(0, 100);
    l.post_recv(1, 1000);
    memset(l.mr.base + 65536, 0x77, 200);
    l.send(0, len, 5);
    VIP_DESCRIPTOR *d = nullptr;
    REQUIRE(VipRecvWait(l.r, vt::kWaitMs, &d) == VIP_DESCRIPTOR_ERROR);
    CHECK(d == l.mr.desc(0));
    CHECK((d->CS.Status & VIP_STATUS_DONE) != 0);
    CHECK((d->CS.Status & VIP_STATUS_LENGTH_ERROR) != 0);
    CHECK((d->CS.Status & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_RECEIVE);
    // Nothing past the descriptor's buffer was written.
    CHECK(l.mr.base[65536 + 100] == 0x77);
    CHECK(vt::vi_state(l.r) == VIP_STATE_CONNECTED);
    REQUIRE(VipSendWait(l.s, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(vt::vi_state(l.s) == VIP_STATE_CONNECTED);
    l.send(1, 1000, 6);
    REQUIRE(VipRecvWait(l.r, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d == l.mr.desc(1));
    CHECK(d->CS.Length == 1000);
    CHECK(l.received(1, 1000, 6));
    REQUIRE(VipSendWait(l.s, vt::kWaitMs, &d) == VIP_SUCCESS);
}

namespace {

// Both sides end up in the Error state with their queues flushed; returns
// what was taken off the sender's queues.
std::vector<vt::Taken> expect_broken(Link &l, size_t sender_completions) {
    std::vector<vt::Taken> rtaken, staken;
    CHECK(vt::drive_to_state(l.r, VIP_STATE_ERROR, vt::kWaitMs, &rtaken));
    CHECK(vt::drive_to_state(l.s, VIP_STATE_ERROR, vt::kWaitMs, &staken));
    vt::drive_until(
        l.s, [&] { return staken.size() >= sender_completions; }, vt::kWaitMs, &staken);
    CHECK(staken.size() == sender_completions);
    // Nothing more is posted on a broken connection.
    vt::set_desc(l.ms.desc(60), l.ms.base + 8192, 8, l.ms.mh);
    CHECK(VipPostSend(l.s, l.ms.desc(60), l.ms.mh) == VIP_INVALID_STATE);
    vt::set_desc(l.mr.desc(60), l.mr.base + 8192, 8, l.mr.mh);
    CHECK(VipPostRecv(l.r, l.mr.desc(60), l.mr.mh) == VIP_INVALID_STATE);
    return staken;
}

const vt::Taken *find(const std::vector<vt::Taken> &t, VIP_DESCRIPTOR *d) {
    for (auto &x : t)
        if (x.desc == d) return &x;
    return nullptr;
}

} // namespace

TEST_CASE("Reliable delivery: a message without a receive descriptor breaks the connection",
          "[reliability]") {
    std::string device = VT_DEVICE();
    Link l(device, VIP_SERVICE_RELIABLE_DELIVERY);
    // The sender waits for answers that will never come: flushed.
    vt::set_desc(l.ms.desc(40), l.ms.base + 8192, 64, l.ms.mh);
    REQUIRE(VipPostRecv(l.s, l.ms.desc(40), l.ms.mh) == VIP_SUCCESS);
    l.send(0, 64, 1);
    VIP_ERROR_DESCRIPTOR e{};
    {
        vt::Pump pump(l.r);
        REQUIRE(l.rerrors.wait_for(VIP_ERROR_RECVQ_EMPTY, l.r, vt::kWaitMs, &e));
    }
    CHECK(e.NicHandle == l.nr.nic);
    CHECK(e.ViHandle == l.r);
    CHECK(e.ResourceCode == VIP_RESOURCE_VI);
    CHECK(e.ErrorCode == VIP_ERROR_RECVQ_EMPTY);
    auto staken = expect_broken(l, 2);
    const vt::Taken *flushed = find(staken, l.ms.desc(40));
    REQUIRE(flushed != nullptr);
    CHECK(flushed->recv);
    CHECK(flushed->rc == VIP_DESCRIPTOR_ERROR);
    CHECK((l.ms.desc(40)->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR) != 0);
    CHECK(l.ms.desc(40)->CS.Length == 0);
    // The sender is told its peer is gone.
    VIP_ERROR_DESCRIPTOR se{};
    CHECK(l.serrors.wait_for(VIP_ERROR_CONN_LOST, l.s, vt::kWaitMs, &se));
    CHECK(se.NicHandle == l.ns.nic);
    CHECK(se.ResourceCode == VIP_RESOURCE_VI);
}

TEST_CASE("Reliable delivery: sends behind the failed one are flushed", "[reliability]") {
    std::string device = VT_DEVICE();
    Link l(device, VIP_SERVICE_RELIABLE_DELIVERY);
    // One receive only: the first message is delivered, the second finds none.
    l.post_recv(0, 200000);
    const uint32_t len = 100000;
    for (size_t i = 0; i < 4; ++i) l.send(i, len, 10 + static_cast<uint32_t>(i));
    std::vector<vt::Taken> rtaken;
    REQUIRE(vt::drive_to_state(l.r, VIP_STATE_ERROR, vt::kWaitMs, &rtaken));
    REQUIRE(rtaken.size() == 1);
    CHECK(rtaken[0].desc == l.mr.desc(0));
    CHECK(rtaken[0].rc == VIP_SUCCESS);
    CHECK(l.received(0, len, 10));
    CHECK(l.rerrors.wait_for(VIP_ERROR_RECVQ_EMPTY, l.r, vt::kWaitMs));
    auto staken = expect_broken(l, 4);
    REQUIRE(staken.size() == 4);
    for (size_t i = 0; i < 4; ++i) {
        INFO("send " << i << " status 0x" << std::hex << l.ms.desc(i)->CS.Status);
        CHECK(staken[i].desc == l.ms.desc(i));
        CHECK((l.ms.desc(i)->CS.Status & VIP_STATUS_DONE) != 0);
    }
    // Delivered: success.  Dropped: an error.  Never processed: flushed.
    CHECK(staken[0].rc == VIP_SUCCESS);
    CHECK(staken[1].rc == VIP_DESCRIPTOR_ERROR);
    for (size_t i = 2; i < 4; ++i) {
        INFO("send " << i << " status 0x" << std::hex << l.ms.desc(i)->CS.Status);
        CHECK(staken[i].rc == VIP_DESCRIPTOR_ERROR);
        CHECK((l.ms.desc(i)->CS.Status & VIP_STATUS_ERROR_MASK) == VIP_STATUS_DESC_FLUSHED_ERROR);
    }
}

TEST_CASE("Reliable delivery: a receive descriptor too short breaks the connection",
          "[reliability]") {
    std::string device = VT_DEVICE();
    Link l(device, VIP_SERVICE_RELIABLE_DELIVERY);
    l.post_recv(0, 100);
    l.post_recv(1, 1000);
    memset(l.mr.base + 65536, 0x77, 200);
    l.send(0, 101, 5);
    std::vector<vt::Taken> rtaken;
    REQUIRE(vt::drive_to_state(l.r, VIP_STATE_ERROR, vt::kWaitMs, &rtaken));
    vt::drive_until(
        l.r, [&] { return rtaken.size() >= 2; }, 2000, &rtaken);
    REQUIRE(rtaken.size() == 2);
    CHECK(rtaken[0].desc == l.mr.desc(0));
    CHECK(rtaken[0].rc == VIP_DESCRIPTOR_ERROR);
    CHECK((l.mr.desc(0)->CS.Status & VIP_STATUS_LENGTH_ERROR) != 0);
    CHECK(l.mr.base[65536 + 100] == 0x77);
    CHECK(rtaken[1].desc == l.mr.desc(1));
    CHECK((l.mr.desc(1)->CS.Status & VIP_STATUS_ERROR_MASK) == VIP_STATUS_DESC_FLUSHED_ERROR);
    CHECK(l.rerrors.wait_any(l.r, vt::kWaitMs));
    expect_broken(l, 1);
}

TEST_CASE("Reliable reception: a send completes only once the data is received", "[reliability]") {
    std::string device = VT_DEVICE();
    Link l(device, VIP_SERVICE_RELIABLE_RECEPTION);
    for (uint32_t len : {16u, 100000u}) {
        INFO("length " << len);
        l.post_recv(0, 200000);
        // The receiver's thread does nothing but wait for the receive; when
        // the send completes the receive must already be complete.
        std::atomic<bool> stop{false};
        auto receiver = std::async(std::launch::async, [&] {
            VIP_DESCRIPTOR *d = nullptr;
            VIP_RETURN rc = VIP_TIMEOUT;
            while (rc == VIP_TIMEOUT && !stop) rc = VipRecvWait(l.r, 100, &d);
            return rc;
        });
        l.send(0, len, len);
        VIP_DESCRIPTOR *d = nullptr;
        VIP_RETURN rc = VipSendWait(l.s, vt::kWaitMs, &d);
        uint32_t recv_status = __atomic_load_n(&l.mr.desc(0)->CS.Status, __ATOMIC_ACQUIRE);
        stop = true;
        CHECK(rc == VIP_SUCCESS);
        CHECK((recv_status & VIP_STATUS_DONE) != 0);
        CHECK(receiver.get() == VIP_SUCCESS);
        CHECK(l.received(0, len, len));
    }
}

TEST_CASE("Reliable reception: a receive descriptor too short fails both sides", "[reliability]") {
    std::string device = VT_DEVICE();
    for (uint32_t len : {101u, 100000u}) {
        INFO("length " << len);
        Link l(device, VIP_SERVICE_RELIABLE_RECEPTION);
        l.post_recv(0, 100);
        memset(l.mr.base + 65536, 0x77, 200);
        l.send(0, len, 5);
        vt::Pump pump(l.r);
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipSendWait(l.s, vt::kWaitMs, &d) == VIP_DESCRIPTOR_ERROR);
        CHECK(d == l.ms.desc(0));
        CHECK((d->CS.Status & VIP_STATUS_DONE) != 0);
        CHECK((d->CS.Status & VIP_STATUS_ERROR_MASK) == VIP_STATUS_REMOTE_DESC_ERROR);
        CHECK((d->CS.Status & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_SEND);
        std::vector<vt::Taken> rtaken;
        REQUIRE(vt::drive_until(
            l.r, [&] { return !rtaken.empty(); }, vt::kWaitMs, &rtaken));
        CHECK(rtaken[0].desc == l.mr.desc(0));
        CHECK(rtaken[0].rc == VIP_DESCRIPTOR_ERROR);
        CHECK((l.mr.desc(0)->CS.Status & VIP_STATUS_ERROR_MASK) == VIP_STATUS_LENGTH_ERROR);
        CHECK(l.mr.base[65536 + 100] == 0x77);
        expect_broken(l, 0);
    }
}

TEST_CASE("Reliable reception: a message without a receive descriptor fails the send",
          "[reliability]") {
    std::string device = VT_DEVICE();
    Link l(device, VIP_SERVICE_RELIABLE_RECEPTION);
    l.send(0, 64, 1);
    vt::Pump pump(l.r);
    VIP_DESCRIPTOR *d = nullptr;
    REQUIRE(VipSendWait(l.s, vt::kWaitMs, &d) == VIP_DESCRIPTOR_ERROR);
    CHECK((d->CS.Status & VIP_STATUS_ERROR_MASK) == VIP_STATUS_REMOTE_DESC_ERROR);
    VIP_ERROR_DESCRIPTOR e{};
    CHECK(l.rerrors.wait_for(VIP_ERROR_RECVQ_EMPTY, l.r, vt::kWaitMs, &e));
    CHECK(e.ResourceCode == VIP_RESOURCE_VI);
    CHECK(e.NicHandle == l.nr.nic);
    expect_broken(l, 0);
}
