// The Boost.Asio wrapper: composed async reads and writes both ways in one io_context,
// a synchronous echo, errors and cancellation.
#include "vipl/asio_stream.h"

#include "helpers.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <functional>
#include <memory>
#include <random>
#include <thread>

using namespace std::chrono_literals;
using vipl::deadline_in;
namespace asio = boost::asio;

namespace {

// Both ends as AsioStreams on one io_context; closing gives the Streams back and closes
// them on two threads (an orderly close waits for the peer).
struct AsioPair {
    asio::io_context io;
    std::unique_ptr<vipl::AsioStream> a, b;
    explicit AsioPair(const std::string &base, const vipl::StreamOptions &o = {}) {
        auto p = vt::connect_pair(base, o);
        a = std::make_unique<vipl::AsioStream>(io, std::move(p.client));
        b = std::make_unique<vipl::AsioStream>(io, std::move(p.server));
    }
    ~AsioPair() {
        vipl::Stream x = a->release(), y = b->release();
        std::thread t([&] { y.close(deadline_in(5s)); });
        x.close(deadline_in(5s));
        t.join();
    }
};

// Sends `total` pattern bytes in random-sized async_writes and, at the same time, reads
// `total` bytes in random-sized async_reads, checking them.
struct Direction {
    vipl::AsioStream &out, &in;
    uint64_t total;
    uint32_t seed;
    std::mt19937_64 rng;
    std::vector<std::byte> wbuf, rbuf;
    uint64_t sent = 0, got = 0;
    bool bad = false;
    std::string error;

    Direction(vipl::AsioStream &o, vipl::AsioStream &i, uint64_t t, uint32_t s)
        : out(o), in(i), total(t), seed(s), rng(s), wbuf(300 * 1024), rbuf(300 * 1024) {}

    void write_next() {
        if (sent == total) return;
        size_t n = std::min<uint64_t>(total - sent, 1 + rng() % wbuf.size());
        vt::fill(wbuf.data(), n, sent, seed);
        asio::async_write(out, asio::buffer(wbuf.data(), n),
                          [this, n](boost::system::error_code ec, size_t k) {
                              if (ec || k != n) return fail("write: " + ec.message());
                              sent += n;
                              write_next();
                          });
    }
    void read_next() {
        if (got == total) return;
        size_t n = std::min<uint64_t>(total - got, 1 + rng() % rbuf.size());
        asio::async_read(in, asio::buffer(rbuf.data(), n),
                         [this, n](boost::system::error_code ec, size_t k) {
                             if (ec || k != n) return fail("read: " + ec.message());
                             if (vt::check(rbuf.data(), n, got, seed) >= 0) return fail("data");
                             got += n;
                             read_next();
                         });
    }
    void fail(const std::string &why) {
        bad = true;
        error = why;
    }
};

} // namespace

TEST_CASE("asio: async_read and async_write of random sizes both ways in one io_context") {
    std::string base = CT_PROVIDER();
    AsioPair p(base);
    constexpr uint64_t kTotal = 6u << 20;
    Direction ab(*p.a, *p.b, kTotal, 21), ba(*p.b, *p.a, kTotal, 22);
    for (Direction *d : {&ab, &ba}) {
        d->write_next();
        d->read_next();
    }
    p.io.run_for(20s);
    INFO(ab.error << " / " << ba.error);
    CHECK(!ab.bad);
    CHECK(!ba.bad);
    CHECK(ab.got == kTotal);
    CHECK(ba.got == kTotal);
}

TEST_CASE("asio: an async_write waits for a slow reader and resumes") {
    std::string base = CT_PROVIDER();
    vipl::StreamOptions o;
    o.recv_buffers = 4;
    o.send_buffers = 4;
    o.buffer_size = 4096;
    AsioPair p(base, o);
    constexpr size_t kTotal = 1 << 20;
    std::vector<std::byte> out(kTotal), in(kTotal);
    vt::fill(out.data(), kTotal, 0, 31);
    boost::system::error_code wec, rec;
    size_t wrote = 0, got = 0;
    asio::async_write(*p.a, asio::buffer(out), [&](boost::system::error_code ec, size_t n) {
        wec = ec;
        wrote = n;
    });
    asio::steady_timer t(p.io, 100ms);
    t.async_wait([&](boost::system::error_code) {
        CHECK(wrote == 0); // the writer is still waiting for the reader
        asio::async_read(*p.b, asio::buffer(in), [&](boost::system::error_code ec, size_t n) {
            rec = ec;
            got = n;
        });
    });
    p.io.run_for(10s);
    CHECK(!wec);
    CHECK(!rec);
    CHECK(wrote == kTotal);
    CHECK(got == kTotal);
    CHECK(vt::check(in.data(), got, 0, 31) == -1);
    CHECK(p.a->stream().counters().would_block > 0);
}

TEST_CASE("asio: end of stream is eof and a pending read can be cancelled") {
    std::string base = CT_PROVIDER();
    AsioPair p(base);
    std::byte buf[16];
    boost::system::error_code got_ec;
    bool done = false;
    p.b->async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, size_t) {
        got_ec = ec;
        done = true;
    });
    p.io.poll();
    CHECK(!done); // nothing to read: it waits, and is not completed inline
    p.b->cancel();
    p.io.run_for(2s);
    CHECK(done);
    CHECK(got_ec == asio::error::operation_aborted);

    std::error_code sec;
    p.a->stream().shutdown_write(sec);
    done = false;
    p.io.restart();
    p.b->async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, size_t n) {
        got_ec = ec;
        done = n == 0;
    });
    p.io.run_for(5s);
    CHECK(done);
    CHECK(got_ec == asio::error::eof);
    // Zero-sized buffers complete at once, without error.
    boost::system::error_code zec;
    CHECK(p.b->read_some(asio::mutable_buffer(), zec) == 0);
    CHECK(!zec);
}

TEST_CASE("asio: a synchronous echo with read and write") {
    std::string base = CT_PROVIDER();
    auto l = vt::bind_free(base);
    std::thread server([&] {
        std::error_code ec;
        auto s = l.accept(deadline_in(10s), ec);
        if (ec) return;
        asio::io_context io;
        vipl::AsioStream as(io, std::move(s));
        std::vector<std::byte> buf(100 * 1024);
        for (;;) {
            boost::system::error_code bec;
            size_t n = as.read_some(asio::buffer(buf), bec);
            if (bec) break; // eof
            asio::write(as, asio::buffer(buf.data(), n), bec);
            if (bec) break;
        }
        as.stream().shutdown_write(ec);
    });
    std::error_code ec;
    auto c = vipl::Stream::connect(l.uri(), deadline_in(10s), ec);
    REQUIRE(!ec);
    asio::io_context io;
    vipl::AsioStream as(io, std::move(c));
    std::mt19937_64 rng(5);
    uint64_t off = 0;
    // Each request fits in what the two ends buffer, so writing all before reading the
    // echo cannot deadlock.
    std::vector<std::byte> out(256 * 1024), in(256 * 1024);
    for (int i = 0; i < 40; ++i) {
        size_t n = 1 + rng() % out.size();
        vt::fill(out.data(), n, off, 5);
        CHECK(asio::write(as, asio::buffer(out.data(), n)) == n);
        CHECK(asio::read(as, asio::buffer(in.data(), n)) == n);
        CHECK(vt::check(in.data(), n, off, 5) == -1);
        off += n;
    }
    as.stream().shutdown_write(ec);
    boost::system::error_code bec;
    std::byte b[1];
    CHECK(as.read_some(asio::buffer(b), bec) == 0);
    CHECK(bec == asio::error::eof);
    server.join();
}
