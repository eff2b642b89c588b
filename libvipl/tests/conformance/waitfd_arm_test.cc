// VipGetViWaitFdEx(VIP_WAITFD_EXPLICIT_ARM) and VipArmViWaitFd: the program arms the
// wait fd itself before it sleeps; an armed fd wakes at the next event, or at once when
// something is there already.
#include "support.h"

#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <thread>

namespace {

void send_one(vt::Memory &m, VIP_VI_HANDLE vi, size_t slot) {
    vt::set_desc(m.desc(slot), m.base + 8192 + slot * 256, 64, m.mh);
    REQUIRE(VipPostSend(vi, m.desc(slot), m.mh) == VIP_SUCCESS);
}

// Takes the message that came (it may still be on its way) and posts its buffer again.
void take_recv(VIP_VI_HANDLE vi, vt::Memory &m) {
    VIP_DESCRIPTOR *d = nullptr;
    for (int i = 0; i < 1000 && !d; ++i)
        if (VipRecvDone(vi, &d) != VIP_SUCCESS) d = nullptr;
    REQUIRE(d);
    REQUIRE(VipPostRecv(vi, d, m.mh) == VIP_SUCCESS);
}

// A connected pair, 8 receives posted on each side, and a's wait fd in the explicit mode.
struct ArmedPair {
    explicit ArmedPair(const std::string &device)
        : shm(device.rfind("shm", 0) == 0), na(device), nb(device), ma(na, 1 << 16),
          mb(nb, 1 << 16) {
        p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, nullptr, nullptr,
                             nullptr, [&](VIP_VI_HANDLE a, VIP_VI_HANDLE b) {
                                 post_recvs(ma, a);
                                 post_recvs(mb, b);
                             });
        REQUIRE(VipGetViWaitFdEx(p.a, VIP_WAITFD_EXPLICIT_ARM, &fd) == VIP_SUCCESS);
    }
    static void post_recvs(vt::Memory &m, VIP_VI_HANDLE vi) {
        for (size_t i = 0; i < 8; ++i) {
            vt::set_desc(m.desc(i), m.base + 8192 + i * 256, 256, m.mh);
            REQUIRE(VipPostRecv(vi, m.desc(i), m.mh) == VIP_SUCCESS);
        }
    }
    bool shm;
    vt::Nic na, nb;
    vt::Memory ma, mb;
    vt::Pair p;
    int fd = -1;
};

} // namespace

TEST_CASE("An explicitly armed wait fd wakes at the next message, or at once if one waits",
          "[ext][waitfd]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 1 << 16), mb(nb, 1 << 16);
    vt::Pair p =
        vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, nullptr, nullptr,
                         nullptr, [&](VIP_VI_HANDLE a, VIP_VI_HANDLE) {
                             for (size_t i = 0; i < 16; ++i) {
                                 vt::set_desc(ma.desc(i), ma.base + 8192 + i * 256, 256, ma.mh);
                                 REQUIRE(VipPostRecv(a, ma.desc(i), ma.mh) == VIP_SUCCESS);
                             }
                         });
    int fd = -1;
    CHECK(VipArmViWaitFd(p.a) == VIP_INVALID_STATE); // no wait fd yet
    CHECK(VipGetViWaitFdEx(p.a, 0x2, &fd) == VIP_INVALID_PARAMETER);
    REQUIRE(VipGetViWaitFdEx(p.a, VIP_WAITFD_EXPLICIT_ARM, &fd) == VIP_SUCCESS);
    REQUIRE(fd >= 0);
    VIP_DESCRIPTOR *d;
    size_t slot = 0;
    for (int round = 0; round < 10; ++round) {
        INFO("round " << round);
        // Nothing there: armed, the fd waits for the next message.
        REQUIRE(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
        REQUIRE(VipArmViWaitFd(p.a) == VIP_SUCCESS);
        std::thread later([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(round % 2 ? 20 : 0));
            send_one(mb, p.b, slot);
        });
        CHECK(vt::readable(fd, 5000));
        later.join();
        VIP_DESCRIPTOR *sd;
        REQUIRE(VipSendWait(p.b, vt::kWaitMs, &sd) == VIP_SUCCESS);
        bool got = false;
        for (int i = 0; i < 1000 && !got; ++i) got = VipRecvDone(p.a, &d) == VIP_SUCCESS;
        REQUIRE(got);
        REQUIRE(VipPostRecv(p.a, d, ma.mh) == VIP_SUCCESS);
        slot = (slot + 1) % 16;
    }
    // A message there before arming (not taken): the fd is readable at once.
    send_one(mb, p.b, slot);
    VIP_DESCRIPTOR *sd;
    REQUIRE(VipSendWait(p.b, vt::kWaitMs, &sd) == VIP_SUCCESS);
    REQUIRE(VipArmViWaitFd(p.a) == VIP_SUCCESS);
    CHECK(vt::readable(fd, 1000));
    // The end of the connection wakes an armed fd too.
    bool got = false;
    for (int i = 0; i < 1000 && !got; ++i) got = VipRecvDone(p.a, &d) == VIP_SUCCESS;
    REQUIRE(got);
    REQUIRE(VipArmViWaitFd(p.a) == VIP_SUCCESS);
    REQUIRE(VipDisconnect(p.b) == VIP_SUCCESS);
    CHECK(vt::readable(fd, 5000));

    CHECK(VipArmViWaitFd(nullptr) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50)) CHECK(VipArmViWaitFd(h) == VIP_INVALID_PARAMETER);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("A wait fd armed for arrivals only stays quiet while the peer takes this side's "
          "message, and wakes at the peer's answer",
          "[ext][waitfd]") {
    // Over shm the peer's taking rings only a side armed for it; the tcp provider has no
    // waiter word (its acknowledgement is bytes on the socket, which wake any arming).
    ArmedPair ap(VT_DEVICE());
    vt::Memory &ma = ap.ma, &mb = ap.mb;
    vt::Pair &p = ap.p;
    int fd = ap.fd;
    CHECK(VipArmViWaitFdEx(p.a, 0) == VIP_INVALID_PARAMETER);
    CHECK(VipArmViWaitFdEx(p.a, 0x4) == VIP_INVALID_PARAMETER); // VIP_ARM_EDGE alone
    CHECK(VipArmViWaitFdEx(p.a, 0x8 | VIP_ARM_ARRIVALS) == VIP_INVALID_PARAMETER);
    CHECK(VipArmViWaitFdEx(nullptr, VIP_ARM_ARRIVALS) == VIP_INVALID_PARAMETER);
    VIP_DESCRIPTOR *d;
    for (VIP_ULONG events : {VIP_ARM_ARRIVALS, VIP_ARM_ANY}) {
        INFO("events " << events);
        // A request from a; a arms, then b takes it.  A small send over shm completes
        // once copied into the ring: taken first, it leaves nothing to wake for.
        send_one(ma, p.a, 16);
        VIP_DESCRIPTOR *sd = nullptr;
        for (int i = 0; i < 100 && !sd; ++i)
            if (VipSendDone(p.a, &sd) != VIP_SUCCESS) sd = nullptr;
        REQUIRE(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
        REQUIRE(VipArmViWaitFdEx(p.a, events) == VIP_SUCCESS);
        REQUIRE(VipRecvWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
        REQUIRE(VipPostRecv(p.b, d, mb.mh) == VIP_SUCCESS);
        if (ap.shm && sd) CHECK(vt::readable(fd, 100) == (events == VIP_ARM_ANY));
        for (int i = 0; i < 1000 && !sd; ++i)
            if (VipSendDone(p.a, &sd) != VIP_SUCCESS) sd = nullptr;
        REQUIRE(sd);
        // The answer wakes it, however armed.
        REQUIRE(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
        REQUIRE(VipArmViWaitFdEx(p.a, events) == VIP_SUCCESS);
        send_one(mb, p.b, 17);
        CHECK(vt::readable(fd, 5000));
        REQUIRE(VipSendWait(p.b, vt::kWaitMs, &sd) == VIP_SUCCESS);
        bool got = false;
        for (int i = 0; i < 1000 && !got; ++i) got = VipRecvDone(p.a, &d) == VIP_SUCCESS;
        REQUIRE(got);
        REQUIRE(VipPostRecv(p.a, d, ma.mh) == VIP_SUCCESS);
    }
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("An explicitly armed wait fd hears of this side's own completions only as armed, "
          "and not of those a Done took at once",
          "[ext][waitfd]") {
    // Over shm the peer's doorbell makes the fd readable whatever this side takes (drained
    // at the next arming); over tcp the fd shows the socket, and libvipl's own wake-ups.
    ArmedPair ap(VT_DEVICE());
    const bool shm = ap.shm;
    vt::Memory &ma = ap.ma, &mb = ap.mb;
    vt::Pair &p = ap.p;
    int fd = ap.fd;
    VIP_DESCRIPTOR *d, *sd;
    auto take_send = [&] {
        sd = nullptr;
        for (int i = 0; i < 1000 && !sd; ++i)
            if (VipSendDone(p.a, &sd) != VIP_SUCCESS) sd = nullptr;
        REQUIRE(sd);
    };

    // 1. Armed for arrivals, this side's send completing (b not called meanwhile, so
    // nothing comes back) leaves the fd quiet; armed for anything, it wakes it.
    for (VIP_ULONG events : {VIP_ARM_ARRIVALS, VIP_ARM_ANY}) {
        INFO("events " << events);
        REQUIRE(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
        REQUIRE(VipArmViWaitFdEx(p.a, events) == VIP_SUCCESS);
        send_one(ma, p.a, 16);
        CHECK(vt::readable(fd, 100) == (events == VIP_ARM_ANY));
        take_send();
        take_recv(p.b, mb);
    }

    // 1b. A send completion already made but not taken: an fd armed for arrivals does not
    // hear of it (the program may leave it for later); one armed for anything is
    // readable at once.
    send_one(ma, p.a, 16);
    take_recv(p.b, mb);
    for (int i = 0; i < 20; ++i) { // the Done's progress completes the send (shm: acked)
        REQUIRE(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(VipArmViWaitFdEx(p.a, VIP_ARM_ARRIVALS) == VIP_SUCCESS);
    CHECK(!vt::readable(fd, 100));
    REQUIRE(VipArmViWaitFdEx(p.a, VIP_ARM_ANY) == VIP_SUCCESS);
    CHECK(vt::readable(fd, 0));
    take_send();

    // 2. A message a Done takes as it arrives leaves nothing to hear of: over tcp the fd
    // is quiet afterwards (no wake-up of libvipl's own for it).
    REQUIRE(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
    REQUIRE(VipArmViWaitFdEx(p.a, VIP_ARM_ANY) == VIP_SUCCESS);
    send_one(mb, p.b, 17);
    REQUIRE(VipSendWait(p.b, vt::kWaitMs, &sd) == VIP_SUCCESS);
    CHECK(vt::readable(fd, 5000));
    take_recv(p.a, ma);
    if (!shm) CHECK(!vt::readable(fd, 50));

    // 3. One of two messages taken: the other keeps the fd readable.
    REQUIRE(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
    REQUIRE(VipArmViWaitFdEx(p.a, VIP_ARM_ANY) == VIP_SUCCESS);
    send_one(mb, p.b, 18);
    send_one(mb, p.b, 19);
    REQUIRE(VipSendWait(p.b, vt::kWaitMs, &sd) == VIP_SUCCESS);
    REQUIRE(VipSendWait(p.b, vt::kWaitMs, &sd) == VIP_SUCCESS);
    CHECK(vt::readable(fd, 5000));
    std::this_thread::sleep_for(std::chrono::milliseconds(20)); // both there
    take_recv(p.a, ma);
    CHECK(vt::readable(fd, 0));
    take_recv(p.a, ma);

    // 4. A look that found nothing is not trusted for long: a message that came 10 ms
    // later is found by the first Done.
    REQUIRE(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
    send_one(mb, p.b, 20);
    REQUIRE(VipSendWait(p.b, vt::kWaitMs, &sd) == VIP_SUCCESS);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(VipRecvDone(p.a, &d) == VIP_SUCCESS);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("A wait fd armed for an edge-triggered waiter wakes an EPOLLET set at every message, "
          "and a level-triggered arming after it leaves the fd quiet",
          "[ext][waitfd]") {
    ArmedPair ap(VT_DEVICE());
    vt::Memory &mb = ap.mb;
    vt::Pair &p = ap.p;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    REQUIRE(ep >= 0);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    REQUIRE(epoll_ctl(ep, EPOLL_CTL_ADD, ap.fd, &ev) == 0);
    auto edge = [&](int ms) {
        epoll_event out{};
        return epoll_wait(ep, &out, 1, ms) == 1;
    };
    VIP_DESCRIPTOR *d, *sd;
    size_t slot = 0;
    // Nothing drains the doorbell in between: every arming's next message is an edge.
    for (int round = 0; round < 20; ++round) {
        INFO("round " << round);
        REQUIRE(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
        REQUIRE(VipArmViWaitFdEx(p.a, VIP_ARM_ARRIVALS | VIP_ARM_EDGE) == VIP_SUCCESS);
        edge(0); // an edge the last arming left, if any: this round's must come anew
        std::thread later([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(round % 2 ? 20 : 0));
            send_one(mb, p.b, slot);
        });
        CHECK(edge(5000));
        later.join();
        REQUIRE(VipSendWait(p.b, vt::kWaitMs, &sd) == VIP_SUCCESS);
        take_recv(p.a, ap.ma);
        slot = (slot + 1) % 8;
    }
    // A message already there when armed is an edge at once.
    send_one(mb, p.b, slot);
    REQUIRE(VipSendWait(p.b, vt::kWaitMs, &sd) == VIP_SUCCESS);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    edge(0);
    REQUIRE(VipArmViWaitFdEx(p.a, VIP_ARM_ARRIVALS | VIP_ARM_EDGE) == VIP_SUCCESS);
    CHECK(edge(5000));
    take_recv(p.a, ap.ma);
    // A level-triggered arming drains what the edge-triggered ones left: quiet until
    // the next message, then readable.
    REQUIRE(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
    REQUIRE(VipArmViWaitFdEx(p.a, VIP_ARM_ARRIVALS) == VIP_SUCCESS);
    CHECK(!vt::readable(ap.fd, 50));
    send_one(mb, p.b, (slot + 1) % 8);
    REQUIRE(VipSendWait(p.b, vt::kWaitMs, &sd) == VIP_SUCCESS);
    CHECK(vt::readable(ap.fd, 5000));
    take_recv(p.a, ap.ma);
    close(ep);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}
