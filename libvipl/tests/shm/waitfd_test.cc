// Wait descriptors across processes: after Done returned VIP_NOT_DONE, the
// fd of a VI (or of a CQ) is not readable until a message sent by another
// process completes a receive, and then it is, without any other VIPL call.
#include "procs.h"

#include <cstring>
#include <sys/epoll.h>
#include <unistd.h>

namespace {

constexpr uint32_t kLen = 2000; // a copy through the ring
constexpr int kRounds = 20;

// The sender: one VI per discriminator; sends on command.
int sender(vt::Channel &ch, const std::string &d1, const std::string &d2) {
    ch.in_child();
    vt::Ep e1, e2;
    if (!e1.open(65536) || !e2.open(65536) || !e1.connect(d1) || !e2.connect(d2)) {
        fprintf(stderr, "sender: %s%s\n", e1.err.c_str(), e2.err.c_str());
        return 1;
    }
    for (;;) {
        uint64_t cmd;
        if (!ch.recv(&cmd, 20000)) return 2;
        if (cmd == 0) return 0;
        vt::Ep &ep = (cmd >> 32) == 1 ? e1 : e2;
        uint32_t seq = static_cast<uint32_t>(cmd);
        vt::fill_pattern(ep.mem + 4096, kLen, seq);
        vt::set_desc(ep.desc(0), ep.mem + 4096, kLen, ep.mh, VIP_CONTROL_IMMEDIATE, seq);
        if (!ep.post_send(ep.desc(0)) || !ep.wait_send(ep.desc(0))) {
            fprintf(stderr, "sender: %s\n", ep.err.c_str());
            return 3;
        }
    }
}

int readable(int epfd, int timeout_ms) {
    epoll_event ev;
    int n;
    do n = epoll_wait(epfd, &ev, 1, timeout_ms);
    while (n < 0 && errno == EINTR);
    return n;
}

struct Epoll {
    int fd = epoll_create1(EPOLL_CLOEXEC);
    explicit Epoll(int watched) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        REQUIRE(fd >= 0);
        REQUIRE(epoll_ctl(fd, EPOLL_CTL_ADD, watched, &ev) == 0);
    }
    ~Epoll() { close(fd); }
};

void post(vt::Ep &ep, int i) {
    vt::set_desc(ep.desc(i), ep.mem + 4096 + i * 4096, 4096, ep.mh);
    EP_REQUIRE(ep, ep.post_recv(ep.desc(i)));
}

// Waits on the fd until done() stops returning VIP_NOT_DONE, as a program
// would; returns that code and counts the wake-ups that found nothing.
template <class F>
VIP_RETURN wake_until(int epfd, F done, int *spurious, int timeout_ms = 5000) {
    double end = vt::now_ms() + timeout_ms;
    VIP_RETURN rc = VIP_NOT_DONE;
    while (vt::now_ms() < end) {
        if (readable(epfd, static_cast<int>(end - vt::now_ms()) + 1) != 1) continue;
        rc = done();
        if (rc != VIP_NOT_DONE) break;
        ++*spurious;
    }
    return rc;
}

void check_message(vt::Ep &ep, VIP_DESCRIPTOR *d, uint32_t seq) {
    REQUIRE(d);
    CHECK(d->CS.Length == kLen);
    CHECK(d->CS.ImmediateData == seq);
    CHECK(vt::check_pattern(static_cast<uint8_t *>(d->DS[0].Local.Data.Address), kLen, seq));
    post(ep, static_cast<int>(d - ep.desc(0)));
}

} // namespace

TEST_CASE("wait fds: epoll wakes for a message from another process", "[shm][waitfd]") {
    std::string d1 = vt::unique_disc("w"), d2 = vt::unique_disc("x");
    vt::Channel ch;
    vt::Child child(vt::spawn_child([&] { return sender(ch, d1, d2); }));
    ch.in_parent();

    vt::Ep vi_side, cq_side;
    vt::Opts with_cq;
    with_cq.recv_cq = true;
    EP_REQUIRE(vi_side, vi_side.open(65536));
    EP_REQUIRE(cq_side, cq_side.open(65536, with_cq));
    for (int i = 0; i < 2; ++i) {
        post(vi_side, i);
        post(cq_side, i);
    }
    EP_REQUIRE(vi_side, vi_side.accept(d1));
    EP_REQUIRE(cq_side, cq_side.accept(d2));
    double worst = 0;
    int spurious = 0;

    SECTION("VipGetViWaitFd") {
        int fd = -1;
        REQUIRE(VipGetViWaitFd(vi_side.vi, &fd) == VIP_SUCCESS);
        Epoll ep(fd);
        for (uint32_t seq = 1; seq <= kRounds; ++seq) {
            INFO("round " << seq);
            VIP_DESCRIPTOR *d = nullptr;
            REQUIRE(VipRecvDone(vi_side.vi, &d) == VIP_NOT_DONE);
            CHECK(readable(ep.fd, 0) == 0);
            CHECK(readable(ep.fd, 20) == 0);
            double t0 = vt::now_ms();
            REQUIRE(ch.send((uint64_t(1) << 32) | seq));
            REQUIRE(wake_until(
                        ep.fd, [&] { return VipRecvDone(vi_side.vi, &d); }, &spurious) ==
                    VIP_SUCCESS);
            worst = std::max(worst, vt::now_ms() - t0);
            check_message(vi_side, d, seq);
        }
        // Leaving the Connected state makes it readable too.
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipRecvDone(vi_side.vi, &d) == VIP_NOT_DONE);
        CHECK(readable(ep.fd, 0) == 0);
        double t0 = vt::now_ms();
        child.kill_now();
        int after_death = 0;
        CHECK(wake_until(
                  ep.fd, [&] { return VipRecvDone(vi_side.vi, &d); }, &after_death, 2000) ==
              VIP_DESCRIPTOR_ERROR);
        double took = vt::now_ms() - t0;
        printf("[measure] wait fd: peer death seen %.2f ms after SIGKILL (%d empty wake-ups)\n",
               took, after_death);
        CHECK(took < 100);
        CHECK(vi_side.state() == VIP_STATE_ERROR);
    }
    SECTION("VipGetCQWaitFd") {
        int fd = -1;
        REQUIRE(VipGetCQWaitFd(cq_side.rcq, &fd) == VIP_SUCCESS);
        Epoll ep(fd);
        for (uint32_t seq = 1; seq <= kRounds; ++seq) {
            INFO("round " << seq);
            VIP_VI_HANDLE vi;
            VIP_BOOLEAN recv;
            REQUIRE(VipCQDone(cq_side.rcq, &vi, &recv) == VIP_NOT_DONE);
            CHECK(readable(ep.fd, 0) == 0);
            CHECK(readable(ep.fd, 20) == 0);
            double t0 = vt::now_ms();
            REQUIRE(ch.send((uint64_t(2) << 32) | seq));
            REQUIRE(wake_until(
                        ep.fd, [&] { return VipCQDone(cq_side.rcq, &vi, &recv); }, &spurious) ==
                    VIP_SUCCESS);
            worst = std::max(worst, vt::now_ms() - t0);
            CHECK(vi == cq_side.vi);
            CHECK(recv == VIP_TRUE);
            VIP_DESCRIPTOR *d = nullptr;
            REQUIRE(VipRecvDone(cq_side.vi, &d) == VIP_SUCCESS);
            check_message(cq_side, d, seq);
        }
        ch.send(0);
        CHECK(child.wait(10) == 0);
    }
    printf("[measure] wait fd: slowest message wake-up %.2f ms, %d wake-ups that found nothing\n",
           worst, spurious);
}

// The usual wait fd re-arms at every Done that finds nothing, so a receiver that keeps
// calling Done makes its peer ring for each message; explicitly armed, it does not.
TEST_CASE("shm: a receiver polling Done with an explicitly armed wait fd costs no doorbells",
          "[waitfd]") {
    for (bool explicit_arm : {false, true}) {
        INFO((explicit_arm ? "explicit arming" : "arming at every Done that finds nothing"));
        vt::Nic na("shm0"), nb("shm0");
        vt::Memory ma(na, 1 << 16), mb(nb, 1 << 16);
        vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
        int fd;
        REQUIRE(VipGetViWaitFdEx(p.a, explicit_arm ? VIP_WAITFD_EXPLICIT_ARM : 0, &fd) ==
                VIP_SUCCESS);
        const int kMessages = 200;
        VIP_DESCRIPTOR *d;
        for (int i = 0; i < kMessages; ++i) {
            vt::set_desc(ma.desc(0), ma.base + 8192, 64, ma.mh);
            REQUIRE(VipPostRecv(p.a, ma.desc(0), ma.mh) == VIP_SUCCESS);
            REQUIRE(VipRecvDone(p.a, &d) == VIP_NOT_DONE); // arms, in the usual mode
            vt::set_desc(mb.desc(0), mb.base + 8192, 64, mb.mh);
            REQUIRE(VipPostSend(p.b, mb.desc(0), mb.mh) == VIP_SUCCESS);
            bool got = false;
            for (int k = 0; k < 100000 && !got; ++k) got = VipRecvDone(p.a, &d) == VIP_SUCCESS;
            REQUIRE(got);
            REQUIRE(VipSendWait(p.b, 5000, &d) == VIP_SUCCESS);
        }
        VIP_VI_COUNTERS c{};
        REQUIRE(VipQueryViCounters(p.b, &c) == VIP_SUCCESS);
        INFO("doorbells rung by the sender: " << c.DoorbellsRung);
        if (explicit_arm)
            CHECK(c.DoorbellsRung == 0);
        else
            CHECK(c.DoorbellsRung >= kMessages / 2);
        vt::destroy_vi(p.a);
        vt::destroy_vi(p.b);
    }
}

namespace {

// A peer that connects, then waits to be killed (or told to go).
int idle_peer(vt::Channel &ch, const std::string &disc) {
    ch.in_child();
    vt::Ep e;
    if (!e.open(65536) || !e.connect(disc)) {
        fprintf(stderr, "idle peer: %s\n", e.err.c_str());
        return 1;
    }
    uint64_t cmd = 0;
    ch.recv(&cmd, 20000);
    return 0;
}

} // namespace

// An EPOLLET set hears a hang-up once: the transport's descriptor stays ready, so the
// wait fd makes no new edge.  A waiter that looked, found nothing (the paced liveness
// check had not run yet) and armed again must not sleep for ever.
TEST_CASE("shm: an edge-triggered waiter armed again after its peer died wakes, and sees "
          "the death",
          "[shm][waitfd]") {
    for (int round = 0; round < 5; ++round) {
        INFO("round " << round);
        std::string disc = vt::unique_disc("k");
        vt::Channel ch;
        vt::Child child(vt::spawn_child([&] { return idle_peer(ch, disc); }));
        ch.in_parent();
        vt::Ep side;
        EP_REQUIRE(side, side.open(65536));
        post(side, 0);
        EP_REQUIRE(side, side.accept(disc));
        int fd = -1;
        REQUIRE(VipGetViWaitFdEx(side.vi, VIP_WAITFD_EXPLICIT_ARM, &fd) == VIP_SUCCESS);
        int ep = epoll_create1(EPOLL_CLOEXEC);
        REQUIRE(ep >= 0);
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLET;
        REQUIRE(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0);

        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipRecvDone(side.vi, &d) == VIP_NOT_DONE);
        REQUIRE(VipArmViWaitFdEx(side.vi, VIP_ARM_ANY | VIP_ARM_EDGE) == VIP_SUCCESS);
        CHECK(readable(ep, 0) == 0);
        child.kill_now();
        CHECK(child.wait(10) != -1);
        // The hang-up's one edge; then a look and an arming, as an event loop makes them.
        double t0 = vt::now_ms();
        VIP_RETURN rc = VIP_NOT_DONE;
        for (int wake = 0; wake < 10 && rc == VIP_NOT_DONE; ++wake) {
            REQUIRE(readable(ep, 2000) == 1);
            rc = VipRecvDone(side.vi, &d);
            if (rc == VIP_NOT_DONE)
                REQUIRE(VipArmViWaitFdEx(side.vi, VIP_ARM_ANY | VIP_ARM_EDGE) == VIP_SUCCESS);
        }
        CHECK(rc == VIP_DESCRIPTOR_ERROR);
        CHECK(side.state() == VIP_STATE_ERROR);
        CHECK(vt::now_ms() - t0 < 1000);
        close(ep);
    }
}
