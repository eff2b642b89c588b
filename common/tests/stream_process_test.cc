// Peers in separate processes: random sizes, slow readers, orderly close, killed peers.
#include "helpers.h"

#include <signal.h>
#include <unistd.h>

#include <random>
#include <thread>

using namespace std::chrono_literals;
using vipl::deadline_in;

namespace {

// The child connects to `uri` and writes `total` bytes of pattern `seed` in random-sized
// writes (1 B .. max_write), then closes.  Exit code 0 on success.
int writer_child(const std::string &uri, uint64_t total, uint32_t seed, size_t max_write,
                 const vipl::StreamOptions &o = {}) {
    std::error_code ec;
    auto s = vipl::Stream::connect(uri, deadline_in(10s), ec, o);
    if (ec) return 2;
    std::mt19937_64 rng(seed);
    std::vector<std::byte> buf(max_write);
    uint64_t off = 0;
    while (off < total) {
        size_t n = std::min<uint64_t>(total - off, 1 + rng() % max_write);
        vt::fill(buf.data(), n, off, seed);
        if (!vt::write_all(s, buf.data(), n)) return 3;
        off += n;
    }
    return s.close(deadline_in(20s)) ? 4 : 0;
}

// Reads until end of stream in random-sized reads, checking every byte; returns bytes read.
uint64_t read_check(vipl::Stream &s, uint32_t seed, size_t max_read, uint32_t rseed,
                    std::error_code &ec, std::chrono::milliseconds pause = 0ms) {
    std::mt19937_64 rng(rseed);
    std::vector<std::byte> buf(max_read);
    uint64_t off = 0;
    for (;;) {
        size_t want = 1 + rng() % max_read;
        size_t n = s.read({buf.data(), want}, deadline_in(20s), ec);
        if (ec) return off;
        if (n == 0) return off;
        int64_t bad = vt::check(buf.data(), n, off, seed);
        if (bad >= 0) {
            FAIL("mismatch at offset " << bad);
        }
        off += n;
        if (pause.count() && rng() % 8 == 0) std::this_thread::sleep_for(pause);
    }
}

} // namespace

TEST_CASE("stream: random write and read sizes arrive byte for byte (child writer)") {
    std::string base = CT_PROVIDER();
    for (uint32_t seed : {1u, 2u}) {
        auto l = vt::bind_free(base);
        uint64_t total = 12u << 20;
        size_t max_write = seed == 1 ? (1u << 20) : 3000;
        int pid =
            vt::spawn([&] { return writer_child(l.uri().to_string(), total, seed, max_write); });
        std::error_code ec;
        auto s = vt::accept_one(l);
        CHECK(read_check(s, seed, seed == 1 ? 100000 : (1u << 20), seed * 7, ec) == total);
        CHECK(!ec);
        CHECK(vt::wait_child(pid) == 0);
        auto c = s.counters();
        CHECK(c.bytes_in == total);
    }
}

TEST_CASE("stream: a slow reader loses nothing, a non-blocking writer gets would-block") {
    std::string base = CT_PROVIDER();
    SECTION("child writes fast, parent reads slowly") {
        vipl::StreamOptions o;
        o.recv_buffers = 4;
        o.buffer_size = 16 * 1024;
        o.send_buffers = 4;
        auto l = vt::bind_free(base, o);
        uint64_t total = 4u << 20;
        int pid = vt::spawn([&] { return writer_child(l.uri().to_string(), total, 9, 50000, o); });
        std::error_code ec;
        auto s = vt::accept_one(l);
        std::this_thread::sleep_for(300ms); // the writer runs out of credits meanwhile
        CHECK(read_check(s, 9, 40000, 3, ec, 2ms) == total);
        CHECK(!ec);
        CHECK(vt::wait_child(pid) == 0);
    }
    SECTION("non-blocking writer, nobody reading") {
        vipl::StreamOptions o;
        o.recv_buffers = 4;
        o.buffer_size = 8 * 1024;
        o.send_buffers = 4;
        auto p = vt::connect_pair(base, o);
        p.client.set_nonblocking(true);
        std::vector<std::byte> chunk(5000);
        uint64_t written = 0;
        std::error_code ec;
        int rounds = 0;
        for (; rounds < 1000; ++rounds) {
            vt::fill(chunk.data(), chunk.size(), written, 5);
            size_t n = p.client.write(chunk, ec);
            if (ec) break;
            CHECK(n > 0);
            // A partial write leaves the rest for the next call.
            written += n;
            if (n < chunk.size()) {
                n = p.client.write({chunk.data() + n, chunk.size() - n}, ec);
                CHECK(n == 0);
                break;
            }
        }
        CHECK(ec == std::errc::operation_would_block);
        // Bounded by the peer's receive buffers plus our send buffers.
        CHECK(written <= 8u * 8 * 1024);
        CHECK(p.client.counters().credit_stalls >= 1);
        // The reader now takes everything; the writer can go on.
        std::vector<std::byte> buf(written);
        size_t got = 0;
        while (got < written) {
            p.client.progress(ec); // pushes what credits allow
            size_t n = p.server.read({buf.data() + got, buf.size() - got}, deadline_in(5s), ec);
            REQUIRE(!ec);
            got += n;
        }
        CHECK(vt::check(buf.data(), got, 0, 5) == -1);
        p.client.progress(ec);
        CHECK(p.client.write(chunk, ec) > 0);
    }
}

TEST_CASE("stream: orderly close delivers everything written before it") {
    std::string base = CT_PROVIDER();
    auto l = vt::bind_free(base);
    uint64_t total = 3u << 20;
    // The child closes and exits at once: close() must not lose what is in flight.
    int pid = vt::spawn([&] { return writer_child(l.uri().to_string(), total, 11, 70000); });
    std::error_code ec;
    auto s = vt::accept_one(l);
    std::this_thread::sleep_for(100ms);
    CHECK(read_check(s, 11, 1u << 20, 1, ec) == total);
    CHECK(!ec);
    CHECK(vt::wait_child(pid) == 0);
}

TEST_CASE("stream: a peer killed mid-transfer gives an error, not a hang") {
    std::string base = CT_PROVIDER();
    INFO(base);
    auto l = vt::bind_free(base);
    int pid = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) -> int {
        std::vector<std::byte> buf(100000);
        for (;;) vt::write_all(s, buf.data(), buf.size());
    });
    std::error_code ec;
    auto s = vt::accept_one(l);
    std::vector<std::byte> buf(65536);
    uint64_t got = 0;
    while (got < (2u << 20)) {
        got += s.read(buf, deadline_in(10s), ec);
        REQUIRE(!ec);
    }
    kill(pid, SIGKILL);
    auto t0 = vipl::Clock::now();
    while (!ec) s.read(buf, deadline_in(10s), ec);
    CHECK(ec == std::errc::connection_reset);
    CHECK(vipl::Clock::now() - t0 < 5s);
    CHECK(vt::wait_child(pid) == 128 + SIGKILL);
    CHECK(s.write(buf, ec) == 0);
    CHECK(ec);
}
