// Streams without the readiness eventfd (StreamOptions::ready_fd = false): fd() is the VI's
// wait fd, and the program asks events() after each wake-up and before each sleep.
#include "share_util.h"

#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <thread>

using namespace std::chrono_literals;
using vipl::deadline_in;

namespace {

enum class Waiter { poll, epoll };

// Waits the documented way until events() has one of `want`: events() first, sleep on
// fd() only when it reported nothing wanted.  Returns the events, 0 after ~5 s.
short wait_events(vipl::Stream &s, short want, Waiter how, int *sleeps) {
    int ep = -1;
    if (how == Waiter::epoll) {
        ep = epoll_create1(EPOLL_CLOEXEC);
        epoll_event e{};
        e.events = EPOLLIN;
        epoll_ctl(ep, EPOLL_CTL_ADD, s.fd(), &e);
    }
    short got = 0;
    auto end = vipl::Clock::now() + 5s;
    while (vipl::Clock::now() < end) {
        got = s.events();
        if (got & (want | POLLERR)) break;
        ++*sleeps;
        if (how == Waiter::poll) {
            pollfd p{s.fd(), POLLIN, 0};
            poll(&p, 1, 1000);
        } else {
            epoll_event e;
            epoll_wait(ep, &e, 1, 1000);
        }
        got = 0;
    }
    if (ep >= 0) close(ep);
    return got;
}

} // namespace

TEST_CASE("stream without ready_fd: fd() is the VI's wait fd; no eventfd is kept") {
    std::string base = CT_PROVIDER();
    INFO(base);
    vipl::StreamOptions with, without;
    without.ready_fd = false;
    int fds0 = vt::count_fds();
    auto a = vt::connect_pair(base, with);
    int fds1 = vt::count_fds();
    auto b = vt::connect_pair(base, without);
    int fds2 = vt::count_fds();
    // Two streams each: an epoll fd and an eventfd fewer per stream.
    CHECK(fds2 - fds1 == fds1 - fds0 - 4);
    CHECK(b.client.fd() >= 0);
    CHECK(b.client.fd() != a.client.fd());
}

TEST_CASE("stream without ready_fd: poll and epoll on fd() wake readers and writers") {
    std::string base = CT_PROVIDER();
    Waiter how = GENERATE(Waiter::poll, Waiter::epoll);
    bool shared = GENERATE(false, true);
    INFO(base << (how == Waiter::poll ? " poll" : " epoll") << (shared ? " shareable" : ""));
    vipl::StreamOptions o;
    o.ready_fd = false;
    o.shareable = shared;
    o.recv_buffers = 2;
    o.send_buffers = 2;
    o.buffer_size = 4096;
    auto p = vt::connect_pair(base, o);
    p.server.set_nonblocking(true);
    p.client.set_nonblocking(true);
    int sleeps = 0;

    SECTION("a reader wakes for data and for the end of the stream") {
        for (int round = 0; round < 20; ++round) {
            std::thread writer([&] {
                std::this_thread::sleep_for(round % 2 ? 20ms : 0ms);
                std::error_code ec;
                p.client.write(vt::bytes("0123456789"), ec);
            });
            REQUIRE((wait_events(p.server, POLLIN, how, &sleeps) & POLLIN));
            writer.join();
            std::byte b[10];
            std::error_code ec;
            CHECK(p.server.read(b, ec) == 10);
            CHECK(vt::text(b, 10) == "0123456789");
        }
        CHECK(sleeps > 0);
        std::thread closer([&] {
            std::this_thread::sleep_for(20ms);
            std::error_code ec;
            p.client.shutdown_write(ec);
        });
        short e = wait_events(p.server, POLLIN, how, &sleeps);
        closer.join();
        CHECK((e & POLLIN));
        CHECK((e & POLLRDHUP));
        std::byte b[1];
        std::error_code ec;
        CHECK(p.server.read(b, ec) == 0);
        CHECK(!ec);
    }
    SECTION("a writer out of credits wakes when the reader takes the data") {
        std::vector<std::byte> chunk(3000);
        uint64_t written = 0;
        std::error_code ec;
        for (int i = 0; i < 100; ++i) {
            vt::fill(chunk.data(), chunk.size(), written, 3);
            size_t n = p.client.write(chunk, ec);
            if (ec) break;
            written += n;
        }
        REQUIRE(ec == std::errc::operation_would_block);
        CHECK(!(p.client.events() & POLLOUT));
        std::atomic<uint64_t> read{0};
        std::thread reader([&] {
            std::this_thread::sleep_for(50ms);
            std::vector<std::byte> b(written);
            std::error_code rec;
            p.server.set_nonblocking(false);
            size_t got = 0;
            while (got < written) {
                size_t n = p.server.read({b.data() + got, written - got}, deadline_in(5s), rec);
                if (rec || n == 0) break;
                got += n;
            }
            read = got;
        });
        short e = wait_events(p.client, POLLOUT, how, &sleeps);
        CHECK((e & POLLOUT));
        CHECK(sleeps > 0);
        // What flow control held back leaves as this side calls the stream.
        vt::wait_for(
            [&] {
                p.client.progress(ec);
                return read.load() > 0;
            },
            5000);
        reader.join();
        CHECK(read.load() == written);
        CHECK(p.client.write(chunk, ec) > 0);
    }
}
