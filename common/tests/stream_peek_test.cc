// peek() (MSG_PEEK) and readable_bytes() (FIONREAD), on private and shareable streams.
#include "share_util.h"

#include <poll.h>

#include <thread>

using namespace std::chrono_literals;
using vipl::deadline_in;

namespace {

// Waits (bounded) until the stream has `n` bytes readable; returns what it reports.  The
// writer's data held back by flow control leaves as it is called too.
size_t await_readable(vipl::Stream &s, size_t n, vipl::Stream &writer) {
    size_t got = 0;
    vt::wait_for(
        [&] {
            std::error_code ec;
            writer.progress(ec);
            return (got = s.readable_bytes()) >= n;
        },
        5000);
    return got;
}

std::string peek_text(vipl::Stream &s, size_t max, std::error_code &ec,
                      vipl::Deadline d = deadline_in(5s)) {
    std::vector<std::byte> b(max);
    size_t n = s.peek(b, d, ec);
    return vt::text(b.data(), n);
}

std::string read_text(vipl::Stream &s, size_t max, std::error_code &ec) {
    std::vector<std::byte> b(max);
    size_t n = s.read(b, deadline_in(5s), ec);
    return vt::text(b.data(), n);
}

} // namespace

TEST_CASE("stream: peek leaves the bytes for read; readable_bytes counts them") {
    std::string base = CT_PROVIDER();
    bool shared = GENERATE(false, true);
    INFO(base << (shared ? " shareable" : " private"));
    vipl::StreamOptions o;
    o.shareable = shared;
    auto p = vt::connect_pair(base, o);
    std::error_code ec;
    CHECK(p.server.readable_bytes() == 0);
    std::byte one[1];
    CHECK(p.server.peek(one, deadline_in(50ms), ec) == 0);
    CHECK(ec == std::errc::timed_out);
    p.server.set_nonblocking(true);
    CHECK(p.server.peek(one, ec) == 0);
    CHECK(ec == std::errc::operation_would_block);
    p.server.set_nonblocking(false);

    // Three writes, each its own message (the reader takes each before the next).
    for (const char *w : {"hello", " ", "world"}) {
        size_t before = p.server.readable_bytes();
        CHECK(p.client.write(vt::bytes(w), ec) == std::strlen(w));
        CHECK(await_readable(p.server, before + std::strlen(w), p.client) ==
              before + std::strlen(w));
    }
    CHECK(peek_text(p.server, 3, ec) == "hel");
    CHECK(peek_text(p.server, 100, ec) == "hello world"); // across messages
    CHECK(p.server.readable_bytes() == 11);
    CHECK(read_text(p.server, 4, ec) == "hell");
    CHECK(p.server.readable_bytes() == 7);
    CHECK(peek_text(p.server, 100, ec) == "o world");
    CHECK(read_text(p.server, 100, ec) == "o world");
    CHECK(p.server.readable_bytes() == 0);

    // A blocking peek waits for data, then leaves it.
    std::thread late([&] {
        std::this_thread::sleep_for(100ms);
        std::error_code wec;
        p.client.write(vt::bytes("late"), wec);
    });
    CHECK(peek_text(p.server, 100, ec, vipl::kNever) == "late");
    late.join();
    CHECK(!ec);
    CHECK(read_text(p.server, 100, ec) == "late");

    // The end of the stream: peek and read give 0, again and again.
    p.client.shutdown_write(ec);
    CHECK(peek_text(p.server, 10, ec) == "");
    CHECK(!ec);
    CHECK(peek_text(p.server, 10, ec) == "");
    CHECK(read_text(p.server, 10, ec) == "");
    CHECK(!ec);
}

TEST_CASE("stream: peek and readable_bytes with many buffers of data in line") {
    std::string base = CT_PROVIDER();
    bool shared = GENERATE(false, true);
    INFO(base << (shared ? " shareable" : " private"));
    vipl::StreamOptions o;
    o.shareable = shared;
    o.buffer_size = 16 * 1024;
    o.stage_threshold = 0; // staged, a write would be one region (the next test case)
    auto p = vt::connect_pair(base, o);
    const size_t kTotal = 100000; // seven messages
    REQUIRE(vt::write_pattern(p.client, kTotal, 9, kTotal));
    CHECK(await_readable(p.server, kTotal, p.client) == kTotal);
    std::vector<std::byte> b(kTotal + 10);
    std::error_code ec;
    CHECK(p.server.peek(b, ec) == kTotal);
    CHECK(vt::check(b.data(), kTotal, 0, 9) < 0);
    CHECK(p.server.peek({b.data(), 20000}, ec) == 20000);
    CHECK(vt::read_pattern(p.server, kTotal, 9) == kTotal);
    CHECK(p.server.readable_bytes() == 0);
}

TEST_CASE("stream: peek at a zero-copy write takes it through the receive buffer") {
    std::string base = CT_PROVIDER();
    INFO(base);
    vipl::StreamOptions o;
    o.zcopy_threshold = 64 * 1024;
    auto p = vt::connect_pair(base, o);
    const size_t kBig = 300 * 1024;
    std::thread writer([&] { vt::write_pattern(p.client, kBig, 4, kBig); }); // zero copy
    std::vector<std::byte> b(kBig);
    std::error_code ec;
    size_t n = p.server.peek(b, deadline_in(10s), ec); // the writer's thread is in write()
    CHECK(!ec);
    CHECK(n > 0);
    CHECK(n <= o.buffer_size); // one piece of a region at a time
    CHECK(vt::check(b.data(), n, 0, 4) < 0);
    CHECK(p.server.readable_bytes() == n);
    CHECK(vt::read_pattern(p.server, kBig, 4) == kBig);
    writer.join();
    // A zero-copy write may stage its tail (a reader on another CPU: stream_zcopy.cc).
    CHECK(p.client.counters().bytes_zcopy >= kBig * 3 / 4);
    CHECK(p.client.counters().bytes_zcopy + p.client.counters().bytes_staged == kBig);
}
