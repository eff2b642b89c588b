// Shareable streams across fork: a child serves a connection its parent accepted, the
// parent's close is invisible, the last holder's close is the orderly one, holders write
// and read at once, abort resets everybody, a private peer works both ways.
#include "share_util.h"

#include <unistd.h>

#include <random>
#include <thread>

using namespace std::chrono_literals;
using vipl::deadline_in;

namespace {

struct Ctl {
    std::atomic<int> parent_closed{0};
    std::atomic<int> others_before{0}; // shared_with_others() in the parent before closing
    std::atomic<int> others_child{0};  // in the child once the parent closed
};

} // namespace

TEST_CASE("shareable: a child serves the connection; the parent's close is not seen") {
    std::string base = CT_PROVIDER();
    INFO(base);
    auto l = vt::bind_free(base, vt::shareable());
    vt::Shared<Ctl> c;
    const uint64_t kTail = 3u << 20; // written by the child before its (last) close
    int peer = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
        std::error_code ec;
        if (s.write(vt::bytes("request"), ec) != 7) return 10;
        std::byte ans[6];
        if (!vt::read_exact(s, ans, sizeof ans)) return 11;
        if (vt::text(ans, sizeof ans) != "answer") return 12;
        // The parent has closed its copy: no end of stream, nothing at all.
        std::byte one[1];
        if (s.read(one, deadline_in(300ms), ec) != 0 || ec != std::errc::timed_out) return 13;
        if (s.write(vt::bytes("bye"), ec) != 3) return 14;
        // The child writes a tail, then closes: everything, then the end.
        if (vt::read_pattern(s, kTail, 5) != kTail) return 15;
        if (s.read(one, deadline_in(10s), ec) != 0 || ec) return 16;
        return s.close(deadline_in(5s)) ? 17 : 0;
    });
    auto s = vt::accept_one(l);
    CHECK(s.options().shareable);
    CHECK(!s.shared_with_others());
    int child = vt::spawn([&] {
        // The parent may be gone from the stream already: answer only once it is.
        if (!vt::wait_for([&] { return c->parent_closed.load() == 1; }, 10000)) return 20;
        c->others_child = s.shared_with_others() ? 1 : 2;
        std::byte req[7];
        if (!vt::read_exact(s, req, sizeof req) || vt::text(req, 7) != "request") return 21;
        std::error_code ec;
        if (s.write(vt::bytes("answer"), ec) != 6) return 22;
        std::byte bye[3];
        if (!vt::read_exact(s, bye, sizeof bye) || vt::text(bye, 3) != "bye") return 23;
        if (!vt::write_pattern(s, kTail, 5)) return 24;
        return s.close(deadline_in(10s)) ? 25 : 0;
    });
    c->others_before = s.shared_with_others() ? 1 : 2;
    auto t0 = vipl::Clock::now();
    CHECK(!s.close(deadline_in(5s)));
    CHECK(vipl::Clock::now() - t0 < 1s); // no fin, no linger
    CHECK(!s.is_open());
    c->parent_closed = 1;
    CHECK(vt::wait_child(child) == 0);
    CHECK(vt::wait_child(peer) == 0);
    CHECK(c->others_before.load() == 1);
    CHECK(c->others_child.load() == 2); // the parent had left
}

TEST_CASE("shareable: the parent as last holder closes in order after its child left") {
    std::string base = CT_PROVIDER();
    INFO(base);
    auto l = vt::bind_free(base, vt::shareable());
    const uint64_t kEach = 1u << 20;
    // The peer reads the child's bytes, then the parent's, then the end.
    int peer = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
        if (vt::read_pattern(s, kEach, 1) != kEach) return 10;
        if (vt::read_pattern(s, kEach, 2) != kEach) return 11;
        std::byte one[1];
        std::error_code ec;
        if (s.read(one, deadline_in(10s), ec) != 0 || ec) return 12;
        return 0;
    });
    auto s = vt::accept_one(l);
    int child = vt::spawn([&] {
        if (!vt::write_pattern(s, kEach, 1)) return 20;
        // Not the last holder: the data stays in the stream, nothing ends.
        return s.close(deadline_in(5s)) ? 21 : 0;
    });
    CHECK(vt::wait_child(child) == 0);
    CHECK(!s.shared_with_others()); // the child is gone
    CHECK(vt::write_pattern(s, kEach, 2));
    CHECK(!s.close(deadline_in(10s)));
    CHECK(vt::wait_child(peer) == 0);
}

TEST_CASE("shareable: parent and child write at once; every write stays contiguous") {
    std::string base = CT_PROVIDER();
    INFO(base);
    auto l = vt::bind_free(base, vt::shareable());
    const uint32_t kRecords = 300;
    vt::Shared<vt::RecordCounts> got;
    int peer = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
        int rc = vt::read_records(s, *got);
        return rc ? rc : s.close(deadline_in(5s)) ? 30 : 0;
    });
    auto s = vt::accept_one(l);
    auto writer = [&](uint32_t id) {
        std::mt19937 rng(id);
        for (uint32_t i = 0; i < kRecords; ++i)
            // Up to 200 KiB: a few send buffers, well within all 16 of them.
            if (!vt::write_record(s, id, i, 1 + rng() % (200 * 1024))) return 40;
        return 0;
    };
    int child = vt::spawn([&] {
        int rc = writer(2);
        return rc ? rc : s.close(deadline_in(5s)) ? 41 : 0;
    });
    CHECK(writer(1) == 0);
    CHECK(vt::wait_child(child) == 0);
    CHECK(!s.close(deadline_in(10s)));
    CHECK(vt::wait_child(peer) == 0);
    INFO(got->error);
    CHECK(got->bad.load() == 0);
    CHECK(got->records[1].load() == kRecords);
    CHECK(got->records[2].load() == kRecords);
}

TEST_CASE("shareable: alone again after each child left, the parent shares anew with the "
          "next; every write stays contiguous") {
    // A lone holder's calls take the stream's lock as a store (census.h): each fork must
    // bring the real lock back, each child's close must leave the parent alone again.
    std::string base = CT_PROVIDER();
    INFO(base);
    auto l = vt::bind_free(base, vt::shareable());
    const uint32_t kRounds = 3, kEach = 120, kAlone = 40;
    vt::Shared<vt::RecordCounts> got;
    int peer = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
        int rc = vt::read_records(s, *got);
        return rc ? rc : s.close(deadline_in(5s)) ? 30 : 0;
    });
    auto s = vt::accept_one(l);
    std::mt19937 rng(7);
    uint32_t seq = 0; // the parent's records, numbered across the rounds
    auto mine = [&](uint32_t n) {
        for (uint32_t i = 0; i < n; ++i)
            if (!vt::write_record(s, 1, seq++, 1 + rng() % (64 * 1024))) return false;
        return true;
    };
    for (uint32_t r = 0; r < kRounds; ++r) {
        CHECK(!s.shared_with_others());
        int child = vt::spawn([&] {
            std::mt19937 crng(100 + r);
            for (uint32_t i = 0; i < kEach; ++i)
                if (!vt::write_record(s, 2 + r, i, 1 + crng() % (64 * 1024))) return 40;
            return s.close(deadline_in(5s)) ? 41 : 0;
        });
        CHECK(mine(kEach));
        CHECK(vt::wait_child(child) == 0);
        CHECK(mine(kAlone)); // alone again
    }
    CHECK(!s.close(deadline_in(10s)));
    CHECK(vt::wait_child(peer) == 0);
    INFO(got->error);
    CHECK(got->bad.load() == 0);
    CHECK(got->records[1].load() == kRounds * (kEach + kAlone));
    for (uint32_t r = 0; r < kRounds; ++r) CHECK(got->records[2 + r].load() == kEach);
}

TEST_CASE("shareable: parent and child read at once; each byte goes to one of them") {
    std::string base = CT_PROVIDER();
    INFO(base);
    auto l = vt::bind_free(base, vt::shareable());
    const uint64_t kWords = 200000; // 8-byte words numbered 0..kWords-1
    vt::Shared<vt::WordSeen> seen;
    int peer = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
        std::vector<uint64_t> w(4096);
        for (uint64_t i = 0; i < kWords; i += w.size()) {
            size_t n = std::min<uint64_t>(w.size(), kWords - i);
            for (size_t k = 0; k < n; ++k) w[k] = i + k;
            if (!vt::write_all(s, reinterpret_cast<std::byte *>(w.data()), n * 8)) return 10;
        }
        return s.close(deadline_in(10s)) ? 11 : 0;
    });
    auto s = vt::accept_one(l);
    int child = vt::spawn([&] {
        int rc = vt::read_words(s, *seen, 1, kWords);
        return rc ? rc : s.close(deadline_in(5s)) ? 20 : 0;
    });
    CHECK(vt::read_words(s, *seen, 0, kWords) == 0);
    CHECK(vt::wait_child(child) == 0);
    CHECK(!s.close(deadline_in(5s)));
    CHECK(vt::wait_child(peer) == 0);
    uint64_t once = 0, twice = 0;
    for (uint64_t i = 0; i < kWords; ++i) {
        uint8_t v = seen->count[i].load();
        once += v == 1;
        twice += v > 1;
    }
    CHECK(once == kWords);
    CHECK(twice == 0);
    CHECK(seen->bad.load() == 0);
    std::printf("[measure] words read by parent %llu, child %llu\n",
                static_cast<unsigned long long>(seen->by[0].load()),
                static_cast<unsigned long long>(seen->by[1].load()));
}

TEST_CASE("shareable: abort in a child resets the connection for the parent and the peer") {
    std::string base = CT_PROVIDER();
    INFO(base);
    auto l = vt::bind_free(base, vt::shareable());
    int peer = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
        std::byte one[1];
        std::error_code ec;
        s.read(one, deadline_in(10s), ec);
        return ec == std::errc::connection_reset ? 0 : 10;
    });
    auto s = vt::accept_one(l);
    int child = vt::spawn([&] {
        s.abort();
        return s.is_open() ? 20 : 0;
    });
    CHECK(vt::wait_child(child) == 0);
    std::byte one[1];
    std::error_code ec;
    CHECK(s.read(one, deadline_in(5s), ec) == 0);
    CHECK(ec == std::errc::connection_reset);
    CHECK(s.write(vt::bytes("x"), ec) == 0);
    CHECK(ec == std::errc::connection_reset);
    CHECK(vt::wait_child(peer) == 0);
    s.close(deadline_in(1s));
}

TEST_CASE("shareable: a private peer never writes zero copy to it, nor it to the peer") {
    std::string base = CT_PROVIDER();
    INFO(base);
    auto o = vt::shareable();
    o.zcopy_threshold = 64 * 1024; // asked for, but a shareable stream offers none
    auto l = vt::bind_free(base, o);
    const uint64_t kBig = 3u << 20;
    vipl::StreamOptions po;
    po.zcopy_threshold = 64 * 1024;
    int peer = vt::spawn_client(l.uri(), po, [&](vipl::Stream &s) {
        // At once after connecting: the peer's wish may not be here yet.
        if (!vt::write_pattern(s, kBig, 3, kBig)) return 10;
        if (vt::read_pattern(s, kBig, 4) != kBig) return 11;
        if (s.counters().bytes_zcopy != 0) return 12;
        return s.close(deadline_in(5s)) ? 13 : 0;
    });
    auto s = vt::accept_one(l);
    CHECK(s.options().zcopy_threshold == 0);
    CHECK(vt::read_pattern(s, kBig, 3) == kBig);
    CHECK(vt::write_pattern(s, kBig, 4, kBig));
    CHECK(s.counters().bytes_zcopy == 0);
    CHECK(!s.close(deadline_in(10s)));
    CHECK(vt::wait_child(peer) == 0);
}

TEST_CASE("shareable: connect() makes one too, shared with the children forked afterwards") {
    std::string base = CT_PROVIDER();
    INFO(base);
    auto l = vt::bind_free(base);
    vipl::Stream server;
    std::error_code aec;
    std::thread acceptor([&] { server = l.accept(deadline_in(10s), aec); });
    std::error_code ec;
    auto s = vipl::Stream::connect(l.uri(), deadline_in(10s), ec, vt::shareable());
    acceptor.join();
    REQUIRE(!ec);
    REQUIRE(!aec);
    int child = vt::spawn([&] {
        std::error_code cec;
        if (s.write(vt::bytes("ping"), cec) != 4) return 20;
        std::byte b[4];
        if (!vt::read_exact(s, b, 4) || vt::text(b, 4) != "pong") return 21;
        return s.close(deadline_in(10s)) ? 22 : 0;
    });
    CHECK(!s.close(deadline_in(5s)));
    // The accepting side (private, in this process) serves the child.
    std::byte b[4];
    CHECK(vt::read_exact(server, b, 4));
    CHECK(vt::text(b, 4) == "ping");
    CHECK(server.write(vt::bytes("pong"), ec) == 4);
    CHECK(server.read(b, deadline_in(10s), ec) == 0); // the end, once the child closed
    CHECK(!ec);
    CHECK(vt::wait_child(child) == 0);
    CHECK(!server.close(deadline_in(5s)));
}

TEST_CASE("shareable: a child destroys the Listener it inherited; the parent accepts on") {
    std::string base = CT_PROVIDER();
    INFO(base);
    auto l = vt::bind_free(base, vt::shareable());
    int child = vt::spawn([&] {
        vipl::Listener gone = std::move(l); // destroyed here, in the child
        return 0;
    });
    CHECK(vt::wait_child(child) == 0);
    for (int i = 0; i < 3; ++i) {
        int peer = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
            std::error_code ec;
            return s.write(vt::bytes("hi"), ec) == 2 && !s.close(deadline_in(5s)) ? 0 : 10;
        });
        auto s = vt::accept_one(l);
        std::byte b[2];
        CHECK(vt::read_exact(s, b, 2));
        CHECK(!s.close(deadline_in(5s)));
        CHECK(vt::wait_child(peer) == 0);
    }
}
