// VipWaitViEvent: a sleep until the VI's next event of the kinds asked for, which takes
// nothing; with and without a wait fd, and beside a program that also polls that fd.
#include "support.h"

#include <poll.h>

#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

// A connected pair with 16 receives posted on each side.
struct Posted {
    explicit Posted(const std::string &device)
        : shm(device.rfind("shm", 0) == 0), na(device), nb(device), ma(na, 1 << 16),
          mb(nb, 1 << 16) {
        p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, nullptr, nullptr,
                             nullptr, [&](VIP_VI_HANDLE a, VIP_VI_HANDLE b) {
                                 post_recvs(ma, a);
                                 post_recvs(mb, b);
                             });
    }
    ~Posted() {
        vt::destroy_vi(p.a);
        vt::destroy_vi(p.b);
    }
    static void post_recvs(vt::Memory &m, VIP_VI_HANDLE vi) {
        for (size_t i = 0; i < 16; ++i) {
            vt::set_desc(m.desc(i), m.base + 8192 + i * 256, 256, m.mh);
            REQUIRE(VipPostRecv(vi, m.desc(i), m.mh) == VIP_SUCCESS);
        }
    }
    // One 64-byte message from `vi`, its send completion taken.
    void send(VIP_VI_HANDLE vi, vt::Memory &m, size_t slot) {
        vt::set_desc(m.desc(slot), m.base + 16384 + slot * 256, 64, m.mh);
        REQUIRE(VipPostSend(vi, m.desc(slot), m.mh) == VIP_SUCCESS);
        VIP_DESCRIPTOR *sd;
        REQUIRE(VipSendWait(vi, vt::kWaitMs, &sd) == VIP_SUCCESS);
    }
    // Takes one arrival on a (a few Dones: tcp may need more than one look), reposts it.
    void take_a() {
        VIP_DESCRIPTOR *d = nullptr;
        for (int i = 0; i < 1000 && !d; ++i)
            if (VipRecvDone(p.a, &d) != VIP_SUCCESS) d = nullptr;
        REQUIRE(d);
        REQUIRE(VipPostRecv(p.a, d, ma.mh) == VIP_SUCCESS);
    }
    bool shm;
    vt::Nic na, nb;
    vt::Memory ma, mb;
    vt::Pair p;
};

long ms_since(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

} // namespace

TEST_CASE("VipWaitViEvent returns at an arrival, at once if one waits, and times out "
          "otherwise; it takes nothing",
          "[ext][waitevent]") {
    Posted t(VT_DEVICE());
    VIP_VI_HANDLE a = t.p.a, b = t.p.b;
    CHECK(VipWaitViEvent(nullptr, VIP_ARM_ANY, 0) == VIP_INVALID_PARAMETER);
    CHECK(VipWaitViEvent(a, 0, 0) == VIP_INVALID_PARAMETER);
    CHECK(VipWaitViEvent(a, 0x4, 0) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipWaitViEvent(h, VIP_ARM_ANY, 0) == VIP_INVALID_PARAMETER);

    // Nothing to take: the whole timeout.
    VIP_DESCRIPTOR *d;
    REQUIRE(VipRecvDone(a, &d) == VIP_NOT_DONE);
    auto start = Clock::now();
    CHECK(VipWaitViEvent(a, VIP_ARM_ARRIVALS, 60) == VIP_TIMEOUT);
    CHECK(ms_since(start) >= 50);

    // Woken by the next message, however late it comes; twenty rounds, so that a wake-up
    // left behind by one round would show as an early return in the next.
    for (int round = 0; round < 20; ++round) {
        INFO("round " << round);
        std::thread later([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(round % 2 ? 20 : 0));
            t.send(b, t.mb, round % 16);
        });
        start = Clock::now();
        VIP_RETURN rc = VIP_TIMEOUT;
        // A spurious return is allowed; a missed wake-up is not (bounded: 5 s).
        bool got = false;
        while (!got && ms_since(start) < 5000) {
            rc = VipWaitViEvent(a, round % 3 ? VIP_ARM_ARRIVALS : VIP_ARM_ANY, 5000);
            if (rc != VIP_SUCCESS) break;
            got = VipRecvDone(a, &d) == VIP_SUCCESS;
        }
        later.join();
        CHECK(rc == VIP_SUCCESS);
        REQUIRE(got);
        REQUIRE(VipPostRecv(a, d, t.ma.mh) == VIP_SUCCESS);
    }

    // A message already there: at once, and it is still there for the Done.
    t.send(b, t.mb, 3);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    start = Clock::now();
    CHECK(VipWaitViEvent(a, VIP_ARM_ARRIVALS, 5000) == VIP_SUCCESS);
    CHECK(ms_since(start) < 1000);
    t.take_a();

    // The peer leaving ends the wait.
    std::thread bye([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        VipDisconnect(b);
    });
    start = Clock::now();
    CHECK(VipWaitViEvent(a, VIP_ARM_ARRIVALS, 5000) == VIP_SUCCESS);
    CHECK(ms_since(start) < 4000);
    bye.join();
}

TEST_CASE("Two threads in VipWaitViEvent on one VI both wake at the next message and at "
          "the peer's leaving",
          "[ext][waitevent][threads]") {
    // The first sleeper waits edge-triggered, the second polls the doorbell and drains
    // it: neither may take the other's wake-up.
    Posted t(VT_DEVICE());
    VIP_VI_HANDLE a = t.p.a, b = t.p.b;
    for (int round = 0; round < 6; ++round) {
        INFO("round " << round);
        std::atomic<int> woken{0};
        auto sleeper = [&] {
            if (VipWaitViEvent(a, VIP_ARM_ARRIVALS, 5000) == VIP_SUCCESS) ++woken;
        };
        std::thread s1(sleeper), s2(sleeper);
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        auto start = Clock::now();
        if (round < 5)
            t.send(b, t.mb, round);
        else
            VipDisconnect(b);
        s1.join();
        s2.join();
        CHECK(woken.load() == 2);
        CHECK(ms_since(start) < 4000);
        if (round < 5) t.take_a();
    }
}

TEST_CASE("VipWaitViEvent for arrivals sleeps through this side's own send completing",
          "[ext][waitevent]") {
    Posted t(VT_DEVICE());
    VIP_VI_HANDLE a = t.p.a, b = t.p.b;
    // a's message, taken by b: a's send completion is there or comes while a waits.  Over
    // tcp the acknowledgement is bytes on the socket, which may end any wait early (a
    // spurious return); over shm nothing but an arrival may end it.
    vt::set_desc(t.ma.desc(0), t.ma.base + 16384, 64, t.ma.mh);
    REQUIRE(VipPostSend(a, t.ma.desc(0), t.ma.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d;
    REQUIRE(VipRecvWait(b, vt::kWaitMs, &d) == VIP_SUCCESS);
    if (t.shm) CHECK(VipWaitViEvent(a, VIP_ARM_ARRIVALS, 100) == VIP_TIMEOUT);
    // Armed for anything, the completion ends the wait at once.
    auto start = Clock::now();
    CHECK(VipWaitViEvent(a, VIP_ARM_ANY, 5000) == VIP_SUCCESS);
    CHECK(ms_since(start) < 1000);
    VIP_DESCRIPTOR *sd = nullptr;
    for (int i = 0; i < 1000 && !sd; ++i)
        if (VipSendDone(a, &sd) != VIP_SUCCESS) sd = nullptr;
    CHECK(sd == t.ma.desc(0));
}

TEST_CASE("VipWaitViEvent for arrivals on a VI whose wait fd was armed for anything sleeps "
          "through this side's own sends",
          "[ext][waitevent][waitfd]") {
    // The fd's explicit arming is VipWaitViEvent's too: left armed for anything, this
    // side's own sends completing (on tcp as they are posted) would ring the doorbell
    // while it is awake, and end its next sleep at once.
    Posted t(VT_DEVICE());
    VIP_VI_HANDLE a = t.p.a, b = t.p.b;
    int fd = -1;
    REQUIRE(VipGetViWaitFdEx(a, VIP_WAITFD_EXPLICIT_ARM, &fd) == VIP_SUCCESS);
    REQUIRE(VipArmViWaitFdEx(a, VIP_ARM_ANY) == VIP_SUCCESS);
    t.send(b, t.mb, 0);
    CHECK(vt::readable(fd, 5000));
    t.take_a();
    for (int round = 0; round < 5; ++round) {
        INFO("round " << round);
        int early = 0;
        while (VipWaitViEvent(a, VIP_ARM_ARRIVALS, 20) == VIP_SUCCESS && ++early < 3) {
        }
        REQUIRE(early < 3);
        vt::set_desc(t.ma.desc(round), t.ma.base + 16384 + round * 256, 64, t.ma.mh);
        REQUIRE(VipPostSend(a, t.ma.desc(round), t.ma.mh) == VIP_SUCCESS);
        VIP_DESCRIPTOR *d;
        REQUIRE(VipRecvWait(b, vt::kWaitMs, &d) == VIP_SUCCESS);
        REQUIRE(VipPostRecv(b, d, t.mb.mh) == VIP_SUCCESS);
        REQUIRE(VipSendWait(a, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(VipWaitViEvent(a, VIP_ARM_ARRIVALS, 100) == VIP_TIMEOUT);
    }
}

TEST_CASE("A wait fd stays quiet after VipWaitViEvent woke on the doorbell and a later "
          "one timed out",
          "[ext][waitevent][waitfd]") {
    // VipWaitViEvent leaves the doorbell's count for the fd's next arming to drain.  The
    // case to get right: the arming of a VipWaitViEvent that timed out is still pending,
    // so the fd's arming finds no ring since and must drain for the wake-up before it.
    Posted t(VT_DEVICE());
    VIP_VI_HANDLE a = t.p.a, b = t.p.b;
    int fd = -1;
    REQUIRE(VipGetViWaitFdEx(a, VIP_WAITFD_EXPLICIT_ARM, &fd) == VIP_SUCCESS);
    for (int round = 0; round < 4; ++round) {
        INFO("round " << round);
        std::thread later([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
            t.send(b, t.mb, round);
        });
        CHECK(VipWaitViEvent(a, VIP_ARM_ARRIVALS, 5000) == VIP_SUCCESS);
        later.join();
        t.take_a();
        // An early return or two (the edge of the fd's wake-up in the last round) is
        // allowed; then it sleeps its timeout.
        int early = 0;
        while (VipWaitViEvent(a, VIP_ARM_ARRIVALS, 20) == VIP_SUCCESS && ++early < 3) {
        }
        CHECK(early < 3);
        VIP_DESCRIPTOR *d;
        REQUIRE(VipRecvDone(a, &d) == VIP_NOT_DONE);
        REQUIRE(VipArmViWaitFdEx(a, VIP_ARM_ARRIVALS) == VIP_SUCCESS);
        CHECK(!vt::readable(fd, 50));
        // ... and wakes at the next message.
        t.send(b, t.mb, 8 + round);
        CHECK(vt::readable(fd, 5000));
        t.take_a();
    }
}
