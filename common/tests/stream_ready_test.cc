// Readiness: events() and fd() with set_fd_events(), writability against slow readers.
#include "helpers.h"

#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <thread>

using namespace std::chrono_literals;
using vipl::deadline_in;

namespace {

vipl::StreamOptions small_options() {
    vipl::StreamOptions o;
    o.recv_buffers = 4;
    o.send_buffers = 4;
    o.buffer_size = 4096;
    return o;
}

// Writes pattern bytes without blocking until the stream says it is not writable (or,
// with a limit, that many writes were made); every POLLOUT it reports must let a write
// take at least one byte.  Returns the new offset.
uint64_t fill_up(vipl::Stream &w, uint64_t off, uint32_t seed, int limit = 0) {
    std::byte buf[1000];
    auto end = vipl::Clock::now() + 3s;
    for (int i = 0; vipl::Clock::now() < end && (limit == 0 || i < limit); ++i) {
        if (!(w.events() & POLLOUT)) {
            // Sends under way may still complete and free a buffer: look again shortly.
            std::this_thread::sleep_for(20ms);
            if (!(w.events() & POLLOUT)) return off;
        }
        vt::fill(buf, sizeof buf, off, seed);
        std::error_code ec;
        size_t n = w.write(buf, ec);
        CHECK(n > 0);
        CHECK(!ec);
        off += n;
    }
    if (limit == 0) FAIL("the writer never filled up");
    return off;
}

} // namespace

TEST_CASE("stream: events() and fd() report writability truthfully to a slow reader") {
    std::string base = CT_PROVIDER();
    auto p = vt::connect_pair(base, small_options());
    vipl::Stream &w = p.client;
    w.set_nonblocking(true);
    int fd = w.fd();
    CHECK(w.fd_events() == POLLIN);
    CHECK((w.events() & (POLLIN | POLLOUT)) == POLLOUT);
    CHECK(!vt::readable(fd, 0)); // writable, but only POLLIN was asked for
    w.set_fd_events(POLLOUT);
    CHECK(vt::readable(fd, 0));

    uint64_t off = fill_up(w, 0, 5);
    CHECK(off > 0);
    std::byte b[1] = {};
    std::error_code ec;
    CHECK(w.write(b, ec) == 0);
    CHECK(ec == std::errc::operation_would_block);
    // Nobody reads: any wake-up now is spurious and must not claim writability.
    auto quiet_end = vipl::Clock::now() + 150ms;
    while (vipl::Clock::now() < quiet_end)
        if (vt::readable(fd, 50)) CHECK(!(w.events() & POLLOUT));

    // The reader drains; the writer waits on fd() alone until write() takes bytes again.
    uint64_t got = 0;
    std::atomic<bool> done{false};
    std::thread reader([&] {
        struct Done {
            std::atomic<bool> &d;
            ~Done() { d = true; }
        } mark{done};
        std::byte rb[4096];
        for (;;) {
            std::error_code rec;
            size_t n = p.server.read(rb, deadline_in(5s), rec);
            if (rec || n == 0) return;
            CHECK(vt::check(rb, n, got, 5) == -1);
            got += n;
        }
    });
    // Waiting in an epoll set, as PostgreSQL does, rather than poll().
    int ep = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    REQUIRE(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0);
    bool writable = false;
    auto end = vipl::Clock::now() + 5s;
    while (!writable && vipl::Clock::now() < end)
        if (epoll_wait(ep, &ev, 1, 1000) == 1) writable = (w.events() & POLLOUT) != 0;
    close(ep);
    CHECK(writable);
    off = fill_up(w, off, 5, 50); // the reader is draining: it may never fill up now
    w.shutdown_write(ec);
    // Data held back by flow control leaves only inside the writer's calls.
    while (!done) {
        vt::readable(fd, 50);
        w.events();
    }
    reader.join();
    CHECK(got == off);
    CHECK((w.events() & POLLOUT)); // writes fail at once now (broken_pipe)
}

TEST_CASE("stream: a poll() loop on fd() writes to a slow reader child") {
    std::string base = CT_PROVIDER();
    auto o = small_options();
    auto l = vt::bind_free(base, o);
    constexpr uint64_t kTotal = 1 << 20;
    int pid = vt::spawn_client(l.uri(), o, [&](vipl::Stream &s) {
        std::error_code ec;
        std::vector<std::byte> buf(16 * 1024);
        uint64_t got = 0;
        for (int i = 0;; ++i) {
            size_t n = s.read(buf, deadline_in(10s), ec);
            if (ec) return 3;
            if (n == 0) break;
            if (vt::check(buf.data(), n, got, 9) != -1) return 4;
            got += n;
            if (i % 8 == 0) std::this_thread::sleep_for(1ms);
        }
        return got == kTotal ? 0 : 5;
    });
    std::error_code ec;
    auto s = vt::accept_one(l);
    s.set_nonblocking(true);
    s.set_fd_events(POLLOUT);
    std::vector<std::byte> buf(64 * 1024);
    uint64_t off = 0;
    int waits = 0, false_wakes = 0;
    auto end = vipl::Clock::now() + 10s;
    while (off < kTotal && vipl::Clock::now() < end) {
        size_t len = std::min<uint64_t>(buf.size(), kTotal - off);
        vt::fill(buf.data(), len, off, 9);
        size_t n = s.write({buf.data(), len}, ec);
        off += n;
        if (ec == std::errc::operation_would_block) {
            ++waits;
            REQUIRE(vt::readable(s.fd(), 5000));
            if (!(s.events() & POLLOUT)) ++false_wakes;
        } else {
            REQUIRE(!ec);
        }
    }
    CHECK(off == kTotal);
    CHECK(waits > 0); // the reader was slow enough to make the writer wait
    INFO("waits " << waits << " spurious " << false_wakes);
    CHECK(false_wakes <= waits);
    CHECK(!s.close(deadline_in(10s)));
    CHECK(vt::wait_child(pid) == 0);
}
