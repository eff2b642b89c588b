// A peer killed with SIGKILL in the middle of a transfer: the survivor must
// learn it within 100 ms (product requirement), whether it registered an
// error callback, sleeps in VipRecvWait or polls VipRecvDone, and every
// descriptor it had outstanding must complete, none may hang.
//
// The survivor runs in a forked child so that the notification thread an
// error callback starts does not stay in the test runner; the victim is the
// survivor's own child, forked before the survivor opens anything.
#include "procs.h"

#include <atomic>
#include <cstring>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace {

constexpr uint32_t kBig = 4u << 20;
constexpr int kVictimRecvs = 400;
constexpr int kEarly = 5; // messages the victim sends before the burst
constexpr int kSurvivorRecvs = 50;
constexpr int kSmall = 100; // small sends on each side of each 4 MiB send
constexpr int kSends = 2 * kSmall + 2;
constexpr size_t kRecvBuf = 64 << 10, kSmallBuf = 128 << 10, kBigBuf = 256 << 10;

enum class Watch { callback, blocked_wait, done_loop };

struct ErrLog {
    std::atomic<int> count{0};
    std::atomic<int> code{-1};
    std::atomic<double> first_ms{0};
    std::atomic<bool> foreign{false};
    VIP_VI_HANDLE vi = nullptr;
};

void on_error(VIP_PVOID ctx, VIP_ERROR_DESCRIPTOR *e) {
    double t = vt::now_ms();
    auto *log = static_cast<ErrLog *>(ctx);
    if (log->count.fetch_add(1) == 0) {
        log->first_ms = t;
        log->code = e->ErrorCode;
    }
    if (e->ViHandle != log->vi) log->foreign = true;
}

// Receives a stream until killed, after sending kEarly messages.
int victim(vt::Channel &ch, const std::string &disc, bool fork_bystander) {
    ch.in_child();
    vt::Ep ep;
    if (!ep.open(kRecvBuf + kBig + kEarly * 256)) return 10;
    uint8_t *big = ep.mem + kRecvBuf, *small = big + kBig;
    for (int i = 0; i < kVictimRecvs; ++i) {
        vt::set_desc(ep.desc(i), big, kBig, ep.mh);
        if (!ep.post_recv(ep.desc(i))) return 11;
    }
    if (!ep.connect(disc)) return 12;
    for (int k = 0; k < kEarly; ++k) {
        VIP_DESCRIPTOR *d = ep.desc(kVictimRecvs + k);
        vt::fill_pattern(small + k * 256, 100 + k, 900 + k);
        vt::set_desc(d, small + k * 256, 100 + k, ep.mh, VIP_CONTROL_IMMEDIATE, 0x5000 + k);
        if (!ep.post_send(d) || !ep.wait_send(d)) return 13;
    }
    if (fork_bystander) {
        // A child that makes no VIPL call and outlives this process.
        int p[2];
        if (pipe(p) != 0) return 14;
        pid_t w = fork();
        if (w == 0) {
            uint64_t inherited = vt::maps_with("vipl-conn").size();
            if (write(p[1], &inherited, sizeof inherited) != sizeof inherited) _exit(1);
            sleep(3);
            _exit(0);
        }
        uint64_t inherited = ~0ull;
        if (read(p[0], &inherited, sizeof inherited) != sizeof inherited) return 15;
        ch.send(inherited);
        ch.send(static_cast<uint64_t>(w));
    }
    ch.send(1);
    // Receive the burst up to its first 4 MiB message, then stall there: the
    // rest of the burst stays outstanding at the survivor, whatever the timing.
    double end = vt::now_ms() + 20000;
    while (vt::now_ms() < end) {
        VIP_DESCRIPTOR *d;
        VIP_RETURN rc = VipRecvWait(ep.vi, 100, &d);
        if (rc == VIP_SUCCESS && d->CS.Length == kBig) break;
        if (rc == VIP_SUCCESS)
            VipPostRecv(ep.vi, d, ep.mh);
        else if (rc != VIP_TIMEOUT)
            return 16;
    }
    sleep(20);
    return 0;
}

// Joins a thread however the scope ends (a failed REQUIRE throws).
struct Joiner {
    std::thread &t;
    ~Joiner() {
        if (t.joinable()) t.join();
    }
};

// The survivor: connects, posts a burst, kills the victim, measures.
int survivor(Watch w, vt::Channel &report) {
    report.in_child();
    vt::Channel ch;
    std::string disc = vt::unique_disc("k");
    pid_t pid = vt::spawn_child([&] { return victim(ch, disc, false); });
    ch.in_parent();
    vt::Child victim_proc(pid);

    vt::Ep ep;
    REQUIRE(ep.open(kBigBuf + kBig));
    ErrLog log;
    log.vi = ep.vi;
    if (w == Watch::callback) REQUIRE(VipErrorCallback(ep.nic, &log, on_error) == VIP_SUCCESS);
    for (int i = 0; i < kSurvivorRecvs; ++i) {
        vt::set_desc(ep.desc(i), ep.mem + kRecvBuf + i * 256, 256, ep.mh);
        REQUIRE(ep.post_recv(ep.desc(i)));
    }
    INFO(ep.err);
    REQUIRE(ep.accept(disc));
    uint64_t ready = 0;
    REQUIRE(ch.recv(&ready, 10000));

    // The victim's early messages, checked by whoever takes them.
    auto early_ok = [&](VIP_RETURN rc, VIP_DESCRIPTOR *d, int k) {
        return rc == VIP_SUCCESS && d == ep.desc(k) && d->CS.Length == uint32_t(100 + k) &&
               (d->CS.Status & VIP_STATUS_IMMEDIATE) &&
               d->CS.ImmediateData == uint32_t(0x5000 + k) &&
               vt::check_pattern(ep.mem + kRecvBuf + k * 256, 100 + k, 900 + k);
    };

    std::thread waiter;
    Joiner joiner{waiter};
    std::atomic<bool> blocked{false}, early_good{true};
    std::atomic<double> returned_ms{0};
    VIP_RETURN last_rc = VIP_SUCCESS;
    VIP_DESCRIPTOR *last_desc = nullptr;
    if (w == Watch::blocked_wait) {
        waiter = std::thread([&] {
            for (int k = 0; k < kEarly; ++k) {
                VIP_DESCRIPTOR *d = nullptr;
                VIP_RETURN rc = VipRecvWait(ep.vi, 5000, &d);
                if (!early_ok(rc, d, k)) early_good = false;
            }
            blocked = true;
            last_rc = VipRecvWait(ep.vi, 5000, &last_desc);
            returned_ms = vt::now_ms();
        });
        double end = vt::now_ms() + 5000;
        while (!blocked && vt::now_ms() < end) vt::sleep_ms(0.2);
        vt::sleep_ms(20); // long enough to be asleep in the kernel
    }

    uint8_t *small = ep.mem + kSmallBuf, *big = ep.mem + kBigBuf;
    vt::fill_pattern(big, kBig, 77);
    for (int i = 0; i < kSends; ++i) {
        VIP_DESCRIPTOR *d = ep.desc(64 + i);
        if (i == kSmall || i == 2 * kSmall + 1)
            vt::set_desc(d, big, kBig, ep.mh);
        else
            vt::set_desc(d, small + (i % kSmall) * 64, 64, ep.mh);
        INFO("send " << i);
        REQUIRE(VipPostSend(ep.vi, d, ep.mh) == VIP_SUCCESS);
    }

    double killed_ms = vt::now_ms();
    kill(pid, SIGKILL);
    double seen_ms = -1;
    switch (w) {
    case Watch::callback: {
        // No VIPL call here: the library alone must notice.
        double end = killed_ms + 2000;
        while (log.count == 0 && vt::now_ms() < end) vt::sleep_ms(0.1);
        REQUIRE(log.count > 0);
        seen_ms = log.first_ms;
        break;
    }
    case Watch::blocked_wait:
        waiter.join();
        REQUIRE(blocked);
        seen_ms = returned_ms;
        CHECK(early_good);
        CHECK(last_rc == VIP_DESCRIPTOR_ERROR);
        REQUIRE(last_desc == ep.desc(kEarly));
        CHECK((last_desc->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR));
        break;
    case Watch::done_loop: {
        double end = killed_ms + 2000;
        int k = 0;
        while (vt::now_ms() < end) {
            VIP_DESCRIPTOR *d = nullptr;
            VIP_RETURN rc = VipRecvDone(ep.vi, &d);
            if (rc == VIP_NOT_DONE) continue;
            if (k < kEarly) {
                CHECK(early_ok(rc, d, k));
                ++k;
                continue;
            }
            seen_ms = vt::now_ms();
            CHECK(rc == VIP_DESCRIPTOR_ERROR);
            CHECK(d == ep.desc(kEarly));
            break;
        }
        REQUIRE(seen_ms > 0);
        break;
    }
    }
    int vs = victim_proc.wait(5);
    REQUIRE(WIFSIGNALED(vs));
    double latency = seen_ms - killed_ms;
    report.send(static_cast<uint64_t>(latency * 1000));
    INFO("death noticed " << latency << " ms after kill");
    CHECK(latency < 100);
    CHECK(ep.state() == VIP_STATE_ERROR);

    // Every send completes, in posting order.  Small sends complete once they
    // are in the ring, so successes may follow a failed one; the last 4 MiB
    // send was never read.
    int errors = 0;
    for (int i = 0; i < kSends; ++i) {
        VIP_DESCRIPTOR *d = nullptr;
        VIP_RETURN rc = VipSendWait(ep.vi, 1000, &d);
        INFO("send " << i << ": " << VipReturnString(rc));
        REQUIRE((rc == VIP_SUCCESS || rc == VIP_DESCRIPTOR_ERROR));
        REQUIRE(d == ep.desc(64 + i));
        if (rc == VIP_DESCRIPTOR_ERROR) {
            ++errors;
            CHECK((d->CS.Status & (VIP_STATUS_DESC_FLUSHED_ERROR | VIP_STATUS_TRANSPORT_ERROR)));
        } else {
            CHECK((d->CS.Status & VIP_STATUS_ERROR_MASK) == 0);
        }
        if (i == kSends - 1) CHECK(rc == VIP_DESCRIPTOR_ERROR);
    }
    printf("[measure] %d of %d outstanding sends ended in error\n", errors, kSends);
    VIP_DESCRIPTOR *d = nullptr;
    CHECK(VipSendDone(ep.vi, &d) == VIP_NOT_DONE);

    int taken = w == Watch::callback ? 0 : kEarly + 1;
    for (int k = taken; k < kSurvivorRecvs; ++k) {
        VIP_RETURN rc = VipRecvWait(ep.vi, 1000, &d);
        INFO("receive " << k);
        if (k < kEarly) {
            CHECK(early_ok(rc, d, k));
        } else {
            REQUIRE(rc == VIP_DESCRIPTOR_ERROR);
            REQUIRE(d == ep.desc(k));
            CHECK((d->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR));
        }
    }
    CHECK(VipRecvDone(ep.vi, &d) == VIP_NOT_DONE);
    if (w == Watch::callback) {
        vt::sleep_ms(50);
        CHECK(log.count == 1);
        CHECK(log.code == VIP_ERROR_CONN_LOST);
        CHECK_FALSE(log.foreign);
    }
    return 0;
}

void run(Watch w, const char *what) {
    for (int rep = 0; rep < 3; ++rep) {
        vt::Channel report;
        int status = vt::run_checked([&] { return survivor(w, report); }, 30);
        report.in_parent();
        uint64_t us = 0;
        bool got = report.recv(&us, 0);
        INFO(what << ", run " << rep << ": survivor " << vt::status_text(status));
        if (got) printf("[measure] %s: death noticed %.2f ms after SIGKILL\n", what, us / 1000.0);
        CHECK(got);
        REQUIRE(status == 0);
    }
}

} // namespace

TEST_CASE("peer death: the error callback reports CONN_LOST within 100 ms", "[shm][death]") {
    run(Watch::callback, "error callback");
}

TEST_CASE("peer death: a thread blocked in VipRecvWait returns within 100 ms", "[shm][death]") {
    run(Watch::blocked_wait, "blocked VipRecvWait");
}

TEST_CASE("peer death: a VipRecvDone loop sees the error within 100 ms", "[shm][death]") {
    run(Watch::done_loop, "VipRecvDone loop");
}

TEST_CASE("peer death: a child forked by the dead peer does not hide its death", "[shm][death]") {
    // fork() passes no VIPL resource to the child; the connection must end with
    // the process that owned it even if a child it forked lives on.
    vt::Channel report;
    int status = vt::run_checked(
        [&] {
            report.in_child();
            vt::Channel ch;
            std::string disc = vt::unique_disc("b");
            pid_t pid = vt::spawn_child([&] { return victim(ch, disc, true); });
            ch.in_parent();
            vt::Child victim_proc(pid);
            vt::Ep ep;
            REQUIRE(ep.open(kBigBuf));
            ErrLog log;
            log.vi = ep.vi;
            REQUIRE(VipErrorCallback(ep.nic, &log, on_error) == VIP_SUCCESS);
            for (int i = 0; i < kSurvivorRecvs; ++i) {
                vt::set_desc(ep.desc(i), ep.mem + kRecvBuf + i * 256, 256, ep.mh);
                REQUIRE(ep.post_recv(ep.desc(i)));
            }
            REQUIRE(ep.accept(disc));
            uint64_t inherited = 0, bystander = 0, ready = 0;
            REQUIRE(ch.recv(&inherited, 10000));
            REQUIRE(ch.recv(&bystander, 10000));
            REQUIRE(ch.recv(&ready, 10000));
            double killed_ms = vt::now_ms();
            kill(pid, SIGKILL);
            victim_proc.wait(5);
            double end = killed_ms + 1000;
            while (log.count == 0 && vt::now_ms() < end) vt::sleep_ms(0.1);
            kill(static_cast<pid_t>(bystander), SIGKILL);
            report.send(log.count ? static_cast<uint64_t>((log.first_ms - killed_ms) * 1000)
                                  : ~0ull);
            INFO("connection mappings in the forked child: " << inherited);
            CHECK(inherited == 0);
            REQUIRE(log.count > 0);
            CHECK(log.first_ms - killed_ms < 100);
            CHECK(log.code == VIP_ERROR_CONN_LOST);
            return 0;
        },
        30);
    report.in_parent();
    uint64_t us = 0;
    if (report.recv(&us, 0)) {
        if (us == ~0ull)
            printf("[measure] forked bystander: death not noticed within 1 s\n");
        else
            printf("[measure] forked bystander: death noticed %.2f ms after SIGKILL\n",
                   us / 1000.0);
    }
    INFO("survivor " << vt::status_text(status));
    REQUIRE(status == 0);
}
