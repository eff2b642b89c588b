// wait_fd() and arm(): the wait fd stays quiet until armed, an armed one hears the next
// event, and the peer rings a doorbell only for a side that armed.
#include "helpers.h"

#include <poll.h>

#include <thread>

using namespace std::chrono_literals;

namespace {

// Takes whatever is in flight (the credit grant of a new connection, say) so that the
// checks below start from a stream with nothing to report.
void settle(vipl::Stream &s) {
    std::this_thread::sleep_for(50ms);
    s.events();
}

bool send8(vipl::Stream &s) {
    std::byte b[8] = {};
    return vt::write_all(s, b, sizeof b);
}

bool take8(vipl::Stream &s) {
    std::byte b[8];
    return vt::read_exact(s, b, sizeof b);
}

// A pair whose server a program would watch through wait_fd() (no ready_fd), with
// nothing left for it to report.
vt::Pair quiet_pair(const std::string &base) {
    vipl::StreamOptions o;
    o.ready_fd = false;
    auto p = vt::connect_pair(base, o);
    REQUIRE(p.server.wait_fd() >= 0);
    settle(p.server);
    return p;
}

} // namespace

TEST_CASE("stream: an armed wait fd hears the next message; arm_to_sleep says when to sleep") {
    std::string base = CT_PROVIDER();
    auto p = quiet_pair(base);
    vipl::Stream &s = p.server;
    int wfd = s.wait_fd();

    // Nothing there: arming is the answer, and the fd stays quiet until the peer sends.
    CHECK(s.arm_to_sleep(POLLIN));
    CHECK(!vt::readable(wfd, 100));
    REQUIRE(send8(p.client));
    CHECK(vt::readable(wfd, 5000));
    // The message is there: no sleeping, and arm() reports it without arming.
    CHECK((s.arm(POLLIN) & POLLIN) != 0);
    CHECK(!s.arm_to_sleep(POLLIN));
    REQUIRE(take8(s));

    // Taken: arming again drains the old wake-up, and the fd is quiet once more.
    CHECK(s.arm_to_sleep(POLLIN));
    CHECK(!vt::readable(wfd, 100));
    REQUIRE(send8(p.client));
    CHECK(vt::readable(wfd, 5000));
    REQUIRE(take8(s));

    // Writable at once: a wait for room never sleeps.
    CHECK(!s.arm_to_sleep(POLLOUT));

    // The peer gone: ready (to fail), never a sleep on a fd that will not fire.
    p.client.abort();
    auto end = vipl::Clock::now() + 5s;
    while (s.arm_to_sleep(POLLIN) && vipl::Clock::now() < end) vt::readable(wfd, 100);
    CHECK(!s.arm_to_sleep(POLLIN));
    CHECK((s.events() & POLLERR) != 0);

    // An empty stream has nothing to sleep on.
    vipl::Stream empty;
    CHECK(empty.wait_fd() == -1);
    CHECK(!empty.arm_to_sleep(POLLIN));
}

TEST_CASE("stream: over shm the peer rings only a side that armed, and once per arming") {
    vipl::StreamOptions o;
    o.ready_fd = false;
    o.spin_us = 0; // the peer's blocking calls sleep at once: nothing spins unseen
    auto p = vt::connect_pair("vipl+shm://127.0.0.1", o);
    vipl::Stream &s = p.server, &peer = p.client;
    int wfd = s.wait_fd();
    REQUIRE(wfd >= 0);
    settle(s);
    settle(peer);

    // Not armed: ten messages, no doorbell (the reader takes them by looking).
    uint64_t before = peer.counters().doorbells;
    for (int i = 0; i < 10; ++i) {
        REQUIRE(send8(peer));
        auto end = vipl::Clock::now() + 5s;
        while (!(s.events() & POLLIN) && vipl::Clock::now() < end) std::this_thread::yield();
        REQUIRE(take8(s));
    }
    CHECK(peer.counters().doorbells == before);

    // Armed once: the first of three messages rings, the others find it rung already.
    CHECK(s.arm_to_sleep(POLLIN));
    for (int i = 0; i < 3; ++i) REQUIRE(send8(peer));
    CHECK(peer.counters().doorbells == before + 1);
    CHECK(vt::readable(wfd, 5000));
    for (int i = 0; i < 3; ++i) REQUIRE(take8(s));

    // Armed for arrivals only, with a message of ours in flight: the peer taking it
    // rings nothing; armed for any event, it does.
    uint64_t rung = peer.counters().doorbells;
    REQUIRE(send8(s));
    CHECK(s.arm_to_sleep(POLLIN, false, false));
    REQUIRE(take8(peer));
    CHECK(!vt::readable(wfd, 100));
    CHECK(peer.counters().doorbells == rung);
    REQUIRE(send8(s));
    CHECK(s.arm_to_sleep(POLLIN, false, true));
    REQUIRE(take8(peer));
    CHECK(vt::readable(wfd, 5000));
    CHECK(peer.counters().doorbells == rung + 1);
}

TEST_CASE("stream: a wait's first look may stand on a read that would block, and loses nothing") {
    std::string base = CT_PROVIDER();
    auto p = quiet_pair(base);
    vipl::Stream &s = p.server;
    int wfd = s.wait_fd();

    int stood = 0;
    for (int i = 0; i < 40; ++i) {
        // An event loop's step: a read that finds nothing (non-blocking, or a deadline
        // already past, as the interposer's recv() asks), then a wait.
        std::byte b[8];
        std::error_code ec;
        s.set_nonblocking(i % 2 == 0);
        CHECK(s.read(b, i % 2 == 0 ? vipl::kNever : vipl::Deadline{}, ec) == 0);
        CHECK((ec == std::errc::operation_would_block || ec == std::errc::timed_out));
        s.set_nonblocking(false);
        REQUIRE(send8(p.client));
        short first = s.events_before_arming();
        if (!(first & POLLIN)) {
            // The read's look stood for this one: arming hears what came since at once.
            ++stood;
            short armed = s.arm(POLLIN, true);
            CHECK(((armed & POLLIN) || vt::readable(wfd, 5000)));
        }
        // Once per read: the next call looks.
        short second = s.events_before_arming();
        CHECK((second & POLLIN) != 0);
        REQUIRE(take8(s));
    }
    // Whether a look stood depends on how long the write took (the read's look counts
    // for a few microseconds); every one that did was checked above.
    WARN("first looks that stood on the read: " << stood << " of 40");
}
