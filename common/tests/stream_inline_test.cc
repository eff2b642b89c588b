// Inline sends (StreamOptions::inline_sends): a write with nothing queued before it goes
// out through libvipl's VipPostSendInline where the transport takes them (shm), else
// through the send buffers; either way the bytes arrive whole and in order, including
// when the ring fills and writes fall back to the buffers and back again.
#include "helpers.h"

#include <chrono>
#include <random>
#include <thread>

using namespace std::chrono_literals;

TEST_CASE("inline: writes of every size arrive in order, inline where the transport takes "
          "them, through the send buffers when it is full") {
    std::string base = CT_PROVIDER();
    bool shm = base.find("shm") != std::string::npos;
    for (bool on : {true, false}) {
        INFO(base << (on ? ", inline sends" : ", send buffers only"));
        vipl::StreamOptions o;
        o.inline_sends = on;
        o.stage_threshold = 0; // every byte in data messages
        vt::Pair p = vt::connect_pair(base, o);
        const size_t total = 3 << 20;
        std::vector<std::byte> out(total), in(total);
        vt::fill(out.data(), total, 0, 9);
        // Sizes from 1 byte to past one message (64 KiB): small ones go inline whole,
        // large ones in message-sized pieces.
        // The writer closes (in order) after writing: data held back by flow control
        // leaves only inside its calls.
        vipl::StreamCounters c;
        std::thread w([&] {
            std::mt19937 sizes(3);
            size_t off = 0;
            while (off < total) {
                size_t n = sizes() % 4 == 0 ? 1 + sizes() % 150000 : 1 + sizes() % 700;
                n = std::min(n, total - off);
                if (!vt::write_all(p.client, out.data() + off, n)) return;
                off += n;
            }
            c = p.client.counters();
            p.client.close(vipl::deadline_in(5s));
        });
        std::mt19937 rng(4);
        // The reader starts late: the ring and the credits fill first.
        std::this_thread::sleep_for(50ms);
        size_t got = 0;
        std::error_code ec;
        while (got < total) {
            size_t n = p.server.read({in.data() + got, total - got}, vipl::deadline_in(5s), ec);
            if (ec || n == 0) break;
            got += n;
            // Now and then the reader lags again.
            if (rng() % 64 == 0) std::this_thread::sleep_for(1ms);
        }
        w.join();
        CHECK(!ec);
        REQUIRE(got == total);
        CHECK(vt::check(in.data(), total, 0, 9) == -1);
        // When the last write returned, bytes waiting for credits were not handed yet.
        CHECK(c.bytes_out <= total);
        CHECK(c.bytes_out > 0);
        if (on && shm) {
            CHECK(c.bytes_inline > 0);
            CHECK(c.bytes_inline < total); // the full ring sent some through buffers
        } else {
            CHECK(c.bytes_inline == 0);
        }
    }
}

TEST_CASE("inline: a request-reply exchange sends every message inline over shm") {
    std::string base = CT_PROVIDER();
    bool shm = base.find("shm") != std::string::npos;
    vt::Pair p = vt::connect_pair(base);
    constexpr int kRounds = 2000;
    std::thread srv([&] {
        std::byte b[512];
        std::error_code ec;
        for (int i = 0; i < kRounds; ++i) {
            size_t n = p.server.read({b, sizeof b}, vipl::deadline_in(5s), ec);
            if (ec || n == 0 || !vt::write_all(p.server, b, n)) return;
        }
    });
    std::byte req[300], rep[300];
    bool same = true;
    for (int i = 0; i < kRounds; ++i) {
        vt::fill(req, sizeof req, i, 5);
        REQUIRE(vt::write_all(p.client, req, sizeof req));
        size_t got = 0;
        std::error_code ec;
        while (got < sizeof rep) {
            size_t n = p.client.read({rep + got, sizeof rep - got}, vipl::deadline_in(5s), ec);
            REQUIRE(!ec);
            REQUIRE(n > 0);
            got += n;
        }
        same &= vt::check(rep, sizeof rep, i, 5) == -1;
    }
    srv.join();
    CHECK(same);
    // Nothing queues in a ping-pong: with inline sends, every data message is one.
    vipl::StreamCounters c = p.client.counters(), s = p.server.counters();
    CHECK(c.bytes_out == kRounds * sizeof req);
    CHECK(c.bytes_inline == (shm ? c.bytes_out : 0));
    CHECK(s.bytes_inline == (shm ? s.bytes_out : 0));
}
