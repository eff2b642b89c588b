// Shareable streams under stress: holders killed idle, asleep or in the middle of a
// write; threads of one process reading and writing at once; a thousand fork/close
// cycles that must leave no descriptor or mapping behind.
#include "share_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>
#include <thread>

using namespace std::chrono_literals;
using vipl::deadline_in;

namespace {

// The peer of the kill tests: answers each 8-byte ping with the same 8 bytes until the
// end of the stream (0) or an error (1: reset, other: a code).
int echo_until_end(vipl::Stream &s) {
    std::byte b[8];
    for (;;) {
        std::error_code ec;
        size_t n = s.read(b, deadline_in(20s), ec);
        if (ec == std::errc::connection_reset) return 1;
        if (ec) return 10;
        if (n == 0) return 0;
        if (!vt::write_all(s, b, n)) return 1;
    }
}

// A round trip through the echoing peer.
bool ping(vipl::Stream &s, uint64_t v) {
    std::error_code ec;
    if (s.write({reinterpret_cast<std::byte *>(&v), 8}, ec) != 8) return false;
    uint64_t got = 0;
    return vt::read_exact(s, reinterpret_cast<std::byte *>(&got), 8, 5s) && got == v;
}

} // namespace

TEST_CASE("shareable: a holder killed idle or asleep leaves the others working") {
    std::string base = CT_PROVIDER();
    INFO(base);
    bool asleep = GENERATE(false, true);
    INFO((asleep ? "killed asleep in a read" : "killed idle"));
    auto l = vt::bind_free(base, vt::shareable());
    int peer = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) { return echo_until_end(s); });
    auto s = vt::accept_one(l);
    CHECK(ping(s, 1));
    int child = vt::spawn([&] {
        if (asleep) {
            std::byte b[8];
            std::error_code ec;
            s.read(b, deadline_in(30s), ec); // nobody writes: it sleeps here
        } else {
            pause();
        }
        return 0;
    });
    std::this_thread::sleep_for(100ms);
    CHECK(s.shared_with_others());
    kill(child, SIGKILL);
    CHECK(vt::wait_child(child) == 128 + SIGKILL);
    CHECK(!s.shared_with_others());
    // The survivor talks on and makes the orderly close.
    for (uint64_t i = 2; i < 200; ++i) REQUIRE(ping(s, i));
    CHECK(!s.close(deadline_in(5s)));
    CHECK(vt::wait_child(peer) == 0);
}

TEST_CASE("shareable: a holder killed while writing leaves the others working or reset, never "
          "hung") {
    std::string base = CT_PROVIDER();
    INFO(base);
    auto l = vt::bind_free(base, vt::shareable());
    std::mt19937 rng(7);
    int survived = 0, reset = 0;
    for (int round = 0; round < 20; ++round) {
        INFO("round " << round);
        vt::Shared<vt::RecordCounts> got;
        // The peer checks that whatever arrives is whole records.
        int peer = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
            int rc = vt::read_records(s, *got);
            return rc == 10 || rc == 11 || rc == 14 ? 1 : rc; // 1: the stream broke
        });
        auto s = vt::accept_one(l);
        int child = vt::spawn([&] {
            for (uint32_t i = 0;; ++i)
                if (!vt::write_record(s, 2, i, 1 + i * 7919 % (300 * 1024))) return 1;
        });
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
        kill(child, SIGKILL);
        CHECK(vt::wait_child(child) == 128 + SIGKILL);
        // The parent writes on and closes: it works, or every call says connection_reset.
        auto t0 = vipl::Clock::now();
        std::error_code ec;
        bool wrote = vt::write_record(s, 1, 0, 1000);
        std::error_code cec = s.close(deadline_in(10s));
        CHECK(vipl::Clock::now() - t0 < 8s);
        if (wrote && !cec) {
            ++survived;
        } else {
            ++reset;
            CHECK(cec == std::errc::connection_reset);
        }
        int prc = vt::wait_child(peer);
        INFO(got->error);
        CHECK((prc == 0 || prc == 1));
        CHECK(got->corrupt.load() == 0);
        if (prc == 0) CHECK(got->records[1].load() == 1); // the parent's came after the rest
    }
    std::printf("[measure] %s: writer killed 20 times: %d streams went on, %d were reset\n",
                base.c_str(), survived, reset);
}

TEST_CASE("shareable: threads of one process read and write one stream at once") {
    std::string base = CT_PROVIDER();
    INFO(base);
    auto l = vt::bind_free(base, vt::shareable());
    const uint32_t kRecords = 200;
    const uint64_t kWords = 100000;
    vt::Shared<vt::RecordCounts> got;
    vt::Shared<vt::WordSeen> seen;
    // The peer, shareable too: one thread writes words, another reads records.
    int peer = vt::spawn_client(l.uri(), vt::shareable(), [&](vipl::Stream &s) {
        int wrc = 0;
        std::thread words([&] {
            std::vector<uint64_t> w(1000);
            for (uint64_t i = 0; i < kWords && !wrc; i += w.size()) {
                for (size_t k = 0; k < w.size(); ++k) w[k] = i + k;
                if (!vt::write_all(s, reinterpret_cast<std::byte *>(w.data()), w.size() * 8))
                    wrc = 10;
            }
            std::error_code ec;
            s.shutdown_write(ec); // the readers' end of stream
        });
        int rrc = vt::read_records(s, *got);
        words.join();
        return wrc ? wrc : rrc ? rrc : s.close(deadline_in(5s)) ? 11 : 0;
    });
    auto s = vt::accept_one(l);
    int rc[4] = {};
    std::vector<std::thread> threads;
    for (uint32_t id : {1u, 2u})
        threads.emplace_back([&, id] {
            std::mt19937 rng(id);
            for (uint32_t i = 0; i < kRecords && !rc[id]; ++i)
                if (!vt::write_record(s, id, i, 1 + rng() % (100 * 1024))) rc[id] = 20;
        });
    for (int who : {0, 3})
        threads.emplace_back([&, who] { rc[who] = vt::read_words(s, *seen, who, kWords); });
    for (auto &t : threads) t.join();
    for (int r : rc) CHECK(r == 0);
    CHECK(!s.close(deadline_in(10s)));
    CHECK(vt::wait_child(peer) == 0);
    INFO(got->error);
    CHECK(got->bad.load() == 0);
    CHECK(got->records[1].load() == kRecords);
    CHECK(got->records[2].load() == kRecords);
    uint64_t once = 0;
    for (uint64_t i = 0; i < kWords; ++i) once += seen->count[i].load() == 1;
    CHECK(once == kWords);
    CHECK(seen->bad.load() == 0);
}

TEST_CASE("shareable: 1000 children close their copy; nothing leaks, the peer sees nothing") {
    std::string base = CT_PROVIDER();
    INFO(base);
    auto l = vt::bind_free(base, vt::shareable());
    int peer = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) { return echo_until_end(s); });
    auto s = vt::accept_one(l);
    REQUIRE(ping(s, 0));
    int fds = vt::count_fds(), maps = vt::count_maps();
    int failed = 0;
    for (int i = 0; i < 1000; ++i) {
        int child = vt::spawn([&] {
            int f = vt::count_fds(), m = vt::count_maps();
            if (s.close(deadline_in(5s))) return 2;
            // Its own copies went: descriptors and the stream's mapping.
            return vt::count_fds() < f && vt::count_maps() < m ? 0 : 3;
        });
        failed += vt::wait_child(child) != 0;
    }
    CHECK(failed == 0);
    CHECK(vt::count_fds() == fds);
    CHECK(vt::count_maps() == maps);
    CHECK(!s.shared_with_others());
    CHECK(ping(s, 1)); // no end of stream, no reset
    CHECK(!s.close(deadline_in(5s)));
    CHECK(vt::wait_child(peer) == 0);
}

TEST_CASE("shareable: 1000 connections served by children after the parent closed its copy") {
    std::string base = CT_PROVIDER();
    INFO(base);
    int fds = vt::count_fds();
    {
        auto l = vt::bind_free(base, vt::shareable());
        const int kWarm = 10, kConns = 1000 + kWarm;
        int peer = vt::spawn([&] {
            for (int i = 0; i < kConns; ++i) {
                std::error_code ec;
                auto s = vipl::Stream::connect(l.uri(), deadline_in(10s), ec);
                if (ec) return 10;
                if (!ping(s, i)) return 11;
                if (s.close(deadline_in(5s))) return 12; // the child's fin-ack came
            }
            return 0;
        });
        // The first connections make what a process makes once (libvipl's shared arena).
        int l_fds = 0, l_maps = 0, failed = 0;
        for (int i = 0; i < kConns; ++i) {
            if (i == kWarm) {
                l_fds = vt::count_fds();
                l_maps = vt::count_maps();
            }
            std::error_code ec;
            auto s = l.accept(deadline_in(10s), ec);
            if (ec) {
                FAIL_CHECK("accept " << i << ": " << ec.message());
                break;
            }
            int child = vt::spawn([&] {
                if (echo_until_end(s) != 0) return 2;
                return s.close(deadline_in(5s)) ? 3 : 0; // the last holder: in order
            });
            if (s.close(deadline_in(5s))) ++failed; // not the last: at once
            failed += vt::wait_child(child) != 0;
        }
        CHECK(failed == 0);
        CHECK(vt::wait_child(peer) == 0);
        // Registrations of left streams wait for their last holder (a descriptor each,
        // let go when the next stream is made): the last one's may still be there.
        CHECK(vt::count_fds() <= l_fds + 1);
        CHECK(vt::count_maps() == l_maps);
    }
    CHECK(vt::count_fds() == fds);
}

// With room for 32 registrations only, 200 connections work only if the memory of the
// streams the parent left is deregistered once their last holder is gone.
TEST_CASE("left registrations (fresh process)", "[.][left-registrations]") {
    for (const std::string &base : vt::providers()) {
        INFO(base);
        auto l = vt::bind_free(base, vt::shareable());
        const int kConns = 200;
        int peer = vt::spawn([&] {
            for (int i = 0; i < kConns; ++i) {
                std::error_code ec;
                auto s = vipl::Stream::connect(l.uri(), deadline_in(10s), ec);
                if (ec || !ping(s, i)) return 10;
                if (s.close(deadline_in(5s))) return 11;
            }
            return 0;
        });
        for (int i = 0; i < kConns; ++i) {
            std::error_code ec;
            auto s = l.accept(deadline_in(10s), ec);
            REQUIRE(!ec);
            int child = vt::spawn([&] {
                if (echo_until_end(s) != 0) return 2;
                return s.close(deadline_in(5s)) ? 3 : 0;
            });
            CHECK(!s.close(deadline_in(5s)));
            REQUIRE(vt::wait_child(child) == 0);
        }
        CHECK(vt::wait_child(peer) == 0);
    }
}

TEST_CASE("shareable: the parent's registrations of left streams go with their last holder") {
    CHECK(vt::run_fresh("left registrations (fresh process)", {"VIPL_MAX_REGIONS=32"}, 100) == 0);
}
