// Zero-copy large writes: ordering with buffered bytes, signals, a dying peer; and a
// side-by-side measurement that is run by hand (hidden tag [.zcopy-bench]).
#include "helpers.h"

#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

using namespace std::chrono_literals;
using vipl::deadline_in;

namespace {

void on_alarm(int) {}

double cpu(const rusage &r) {
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

using Reader = vt::ReadHow;

// Reads `total` bytes of pattern `seed` from s, checking them; returns bytes read.
uint64_t read_check(vipl::Stream &s, uint64_t total, uint32_t seed, Reader how = Reader::deadline) {
    return vt::read_checked(s, total, seed, how, 300 * 1024 + 7);
}

// Pins the calling thread to `cpu`; false where it cannot be.
bool pin_thread(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 && sched_getcpu() == cpu;
}

// The calling thread pinned to `cpu` while in scope (ok: it is), then as it was.
struct Pinned {
    cpu_set_t saved;
    bool had = sched_getaffinity(0, sizeof saved, &saved) == 0;
    bool ok;
    explicit Pinned(int cpu) : ok(had && pin_thread(cpu)) {}
    ~Pinned() {
        if (had) sched_setaffinity(0, sizeof saved, &saved);
    }
};

} // namespace

TEST_CASE("stream: large writes go zero-copy in order with buffered bytes") {
    std::string base = CT_PROVIDER();
    Reader how = GENERATE(Reader::deadline, Reader::direct, Reader::random, Reader::polling);
    // Pieces of a region read straight into the reader's buffer may be far larger than a
    // stream buffer (the VI's MaxTransferSize has room for them): 4 KiB buffers too.
    uint32_t buffer = GENERATE(64u * 1024, 4096u);
    INFO("reader " << static_cast<int>(how) << ", buffers of " << buffer);
    vipl::StreamOptions o;
    o.buffer_size = buffer;
    o.zcopy_threshold = 64 * 1024;
    auto p = vt::connect_pair(base, o);
    // Small (buffered), large (zero copy), small, odd-sized large, exactly the threshold.
    const std::vector<size_t> sizes{100, 1 << 20, 3, 200 * 1024 + 13, 1, 3 << 20 | 5, 64 * 1024, 5};
    uint64_t total = 0, large = 0;
    for (size_t n : sizes) {
        total += n;
        if (n >= 64 * 1024) large += n;
    }
    uint64_t got = 0;
    std::thread reader([&] { got = read_check(p.server, total, 7, how); });
    std::vector<std::byte> buf(4 << 20);
    uint64_t off = 0;
    for (size_t n : sizes) {
        vt::fill(buf.data(), n, off, 7);
        std::error_code ec;
        CHECK(p.client.write({buf.data(), n}, ec) == n);
        CHECK(!ec);
        off += n;
    }
    reader.join();
    CHECK(got == total);
    // Zero copy, but for the tails it may stage (a reader on another CPU), which only
    // the large writes have (the small ones are below the stage threshold).
    CHECK(p.client.counters().bytes_zcopy >= large * 3 / 4);
    CHECK(p.client.counters().bytes_zcopy + p.client.counters().bytes_staged == large);
    CHECK(p.client.counters().bytes_out == total);
    CHECK(p.server.options().buffer_size == buffer); // the connecting side's, taken back out
}

TEST_CASE("stream: a blocking zero-copy write stages its tail for a reader on another CPU only") {
    REQUIRE(sysconf(_SC_NPROCESSORS_ONLN) >= 2);
    std::string base = CT_PROVIDER();
    const bool apart = GENERATE(true, false);
    INFO(base << (apart ? ", reader on another CPU" : ", reader on the writer's CPU"));
    Pinned here(0);
    REQUIRE(here.ok);
    vipl::StreamOptions o;
    o.spin_us = 0; // every wait sleeps: no spin that wins
    auto p = vt::connect_pair(base, o);
    const size_t kWrite = 1 << 20, kWrites = 6, kTail = 256 * 1024;
    uint64_t got = 0;
    bool pinned = false;
    std::thread reader([&] {
        pinned = pin_thread(apart ? 1 : 0);
        // A first read that sleeps: where the reader waits is known to the writer.
        std::byte one{};
        std::error_code ec;
        if (p.server.read({&one, 1}, deadline_in(10s), ec) != 1) return;
        got = read_check(p.server, kWrite * kWrites, 3, Reader::direct);
    });
    std::this_thread::sleep_for(100ms);
    std::error_code ec;
    const std::byte one{1};
    CHECK(p.client.write({&one, 1}, ec) == 1);
    std::vector<std::byte> buf(kWrite);
    for (size_t k = 0; k < kWrites && !ec; ++k) {
        vt::fill(buf.data(), kWrite, k * kWrite, 3);
        CHECK(p.client.write(buf, ec) == kWrite);
    }
    CHECK(!ec);
    reader.join();
    REQUIRE(pinned);
    CHECK(got == kWrite * kWrites);
    vipl::StreamCounters c = p.client.counters();
    if (base.starts_with("vipl+shm") && apart) {
        // The writer copies the tail while the reader takes the rest from its pages.
        CHECK(c.bytes_staged == kWrites * kTail);
        CHECK(c.bytes_zcopy == kWrites * (kWrite - kTail));
    } else {
        // One CPU: nothing would overlap the copy.  tcp: no stage (stream_stage.cc).
        CHECK(c.bytes_staged == 0);
        CHECK(c.bytes_zcopy == kWrites * kWrite);
    }
}

TEST_CASE("stream: a zero-copy writer dies with a tail staged: the reader gets an error, no "
          "bad byte") {
    REQUIRE(sysconf(_SC_NPROCESSORS_ONLN) >= 2);
    std::string base = CT_PROVIDER();
    auto l = vt::bind_free(base);
    vipl::StreamOptions o;
    o.spin_us = 0; // with the reader on the other CPU, every write stages its tail (shm)
    int pid = vt::spawn_client(l.uri(), o, [&](vipl::Stream &s) {
        return pin_thread(0) ? vt::write_pattern_until_error(s, 1 << 20, 35) : 3;
    });
    Pinned here(1);
    REQUIRE(here.ok);
    auto s = vt::accept_one(l);
    // No deadline: regions and tails straight into the reader's buffer.
    vt::KilledWriter r = vt::read_killing_writer(s, pid, 8u << 20, 35, 1 << 20);
    CHECK(r.killed);
    CHECK(r.ec == std::errc::connection_reset);
    vt::wait_child(pid);
}

TEST_CASE("stream: a reader dies with a zero-copy tail staged: the writer fails, never hangs") {
    REQUIRE(sysconf(_SC_NPROCESSORS_ONLN) >= 2);
    std::string base = CT_PROVIDER();
    vipl::StreamOptions o;
    o.spin_us = 0;
    auto l = vt::bind_free(base, o);
    int pid = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
        if (!pin_thread(1)) return 3;
        std::error_code ec;
        std::byte one{};
        if (s.read({&one, 1}, ec) != 1) return 4; // a wait: the writer knows our CPU
        std::vector<std::byte> buf(900 * 1024);
        s.read(buf, ec); // into the first region, its tail staged
        raise(SIGKILL);
        return 0;
    });
    Pinned here(0);
    REQUIRE(here.ok);
    auto s = vt::accept_one(l);
    std::this_thread::sleep_for(100ms);
    std::error_code ec;
    const std::byte one{1};
    CHECK(s.write({&one, 1}, ec) == 1);
    std::vector<std::byte> buf(1 << 20);
    auto t0 = vipl::Clock::now();
    for (int i = 0; i < 200 && !ec; ++i) s.write(buf, ec); // zero copy: no deadline
    CHECK((ec == std::errc::connection_reset || ec == std::errc::broken_pipe));
    CHECK((s.counters().bytes_staged > 0) == base.starts_with("vipl+shm"));
    CHECK(vipl::Clock::now() - t0 < 15s);
    CHECK(vt::wait_child(pid) == 128 + SIGKILL);
}

TEST_CASE("stream: deadlines and non-blocking writes copy while zcopy_threshold 0 never goes "
          "zero-copy") {
    std::string base = CT_PROVIDER();
    vipl::StreamOptions o;
    o.zcopy_threshold = 0;
    auto p = vt::connect_pair(base, o);
    o.zcopy_threshold = 64 * 1024;
    auto q = vt::connect_pair(base, o);
    std::vector<std::byte> buf(256 * 1024);
    vt::fill(buf.data(), buf.size(), 0, 3);
    uint64_t got_p = 0, got_q = 0;
    std::thread reader([&] {
        got_p = read_check(p.server, buf.size(), 3);
        got_q = read_check(q.server, 2 * buf.size(), 3);
    });
    std::error_code ec;
    CHECK(p.client.write(buf, ec) == buf.size());
    // A deadline keeps the copying path (the write must be able to return in time).
    CHECK(q.client.write(buf, deadline_in(10s), ec) == buf.size());
    vt::fill(buf.data(), buf.size(), buf.size(), 3);
    q.client.set_nonblocking(true);
    size_t done = 0;
    auto end = vipl::Clock::now() + 10s;
    while (done < buf.size() && vipl::Clock::now() < end) {
        done += q.client.write({buf.data() + done, buf.size() - done}, ec);
        if (ec == std::errc::operation_would_block) std::this_thread::sleep_for(1ms);
    }
    reader.join();
    CHECK(got_p == buf.size());
    CHECK(got_q == 2 * buf.size());
    CHECK(p.client.counters().bytes_zcopy == 0);
    CHECK(q.client.counters().bytes_zcopy == 0);
}

TEST_CASE("stream: a signal ends a zero-copy write only after the peer took what was sent") {
    std::string base = CT_PROVIDER();
    auto l = vt::bind_free(base);
    // Three times what a write offers at once (two regions of 4 MiB): the signal finds
    // part of it not yet offered.
    constexpr uint64_t kTotal = 24u << 20;
    int pid = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
        std::this_thread::sleep_for(400ms); // the writer's signal comes meanwhile
        if (read_check(s, kTotal, 11, Reader::random) != kTotal) return 3;
        return s.close(deadline_in(10s)) ? 4 : 0;
    });
    std::error_code ec;
    auto s = vt::accept_one(l);
    std::vector<std::byte> buf(kTotal);
    vt::fill(buf.data(), buf.size(), 0, 11);

    struct sigaction sa {};
    sa.sa_handler = on_alarm;
    struct sigaction old {};
    sigaction(SIGALRM, &sa, &old);
    itimerval t{};
    t.it_value.tv_usec = 100000;
    setitimer(ITIMER_REAL, &t, nullptr);
    auto t0 = vipl::Clock::now();
    size_t n = s.write(buf, ec);
    auto took = vipl::Clock::now() - t0;
    sigaction(SIGALRM, &old, nullptr);
    CHECK(!ec);
    CHECK(n > 0);
    CHECK(n < kTotal);
    // It waited for the reader (who starts after 400 ms) to take what was under way.
    CHECK(took >= 300ms);
    // The rest follows on; the child checks every byte.
    CHECK(vt::write_all(s, buf.data() + n, kTotal - n));
    CHECK(!s.close(deadline_in(10s)));
    CHECK(vt::wait_child(pid) == 0);
}

TEST_CASE("stream: two ends that both write large buffers before reading do not deadlock") {
    std::string base = CT_PROVIDER();
    // Both zero-copy, or one of them copying (a deadline) while the other offers regions.
    bool both = GENERATE(true, false);
    auto p = vt::connect_pair(base);
    constexpr size_t kBytes = 3 << 20;
    auto run = [&](vipl::Stream &s, uint32_t out_seed, uint32_t in_seed, bool copy) {
        std::vector<std::byte> buf(kBytes);
        vt::fill(buf.data(), kBytes, 0, out_seed);
        std::error_code ec;
        size_t n = copy ? s.write(buf, deadline_in(10s), ec) : s.write(buf, ec);
        CHECK(n == kBytes);
        CHECK(!ec);
        // A copied write may return with bytes held by flow control: they leave while this
        // side goes on calling the stream.
        s.shutdown_write(ec);
        uint64_t got = read_check(s, kBytes, in_seed, Reader::direct);
        std::byte b[1];
        CHECK(s.read(b, deadline_in(10s), ec) == 0);
        CHECK(!ec);
        CHECK(!s.close(deadline_in(10s))); // and until the peer has it all
        return got;
    };
    uint64_t got_a = 0, got_b = 0;
    std::thread a([&] { got_a = run(p.client, 1, 2, false); });
    got_b = run(p.server, 2, 1, !both);
    a.join();
    CHECK(got_a == kBytes);
    CHECK(got_b == kBytes);
}

TEST_CASE("stream: a reader that closes releases a zero-copy writer") {
    std::string base = CT_PROVIDER();
    auto p = vt::connect_pair(base);
    std::vector<std::byte> buf(8 << 20);
    vt::fill(buf.data(), buf.size(), 0, 13);
    std::thread reader([&] {
        std::byte b[100];
        std::error_code ec;
        size_t n = p.server.read(b, deadline_in(10s), ec); // part of the first region
        CHECK(n > 0);
        CHECK(vt::check(b, n, 0, 13) == -1);
        CHECK(!p.server.close(deadline_in(10s)));
    });
    std::error_code ec;
    auto t0 = vipl::Clock::now();
    size_t n = p.client.write(buf, ec);
    CHECK(vipl::Clock::now() - t0 < 8s);
    CHECK(n <= buf.size()); // offered regions count as written, like bytes a socket buffered
    // The reader's close waits for this side to take its end of stream, which the write
    // may have returned just before: a program reads on to the end, as here.
    std::byte end_buf[16];
    std::error_code rec;
    CHECK(p.client.read(end_buf, deadline_in(10s), rec) == 0);
    reader.join();
    // The peer is gone: writing fails soon.
    auto end = vipl::Clock::now() + 5s;
    while (!ec && vipl::Clock::now() < end) p.client.write(buf, deadline_in(1s), ec);
    CHECK((ec == std::errc::broken_pipe || ec == std::errc::connection_reset));
}

TEST_CASE("stream: a zero-copy write to a peer that dies returns and later writes fail") {
    std::string base = CT_PROVIDER();
    auto l = vt::bind_free(base);
    int pid = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &) {
        pause();
        return 0;
    });
    std::error_code ec;
    auto s = vt::accept_one(l);
    std::thread killer([&] {
        std::this_thread::sleep_for(200ms);
        kill(pid, SIGKILL);
    });
    std::vector<std::byte> buf(4 << 20);
    auto t0 = vipl::Clock::now();
    s.write(buf, ec);
    for (int i = 0; i < 4 && !ec; ++i) s.write(buf, ec);
    CHECK(ec);
    CHECK(vipl::Clock::now() - t0 < 15s);
    killer.join();
    vt::wait_child(pid);
    s.abort();
}

TEST_CASE("stream: a reader whose zero-copy writer dies mid-region gets an error") {
    std::string base = CT_PROVIDER();
    auto l = vt::bind_free(base);
    int pid = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
        std::error_code ec;
        std::vector<std::byte> buf(64 << 20);
        s.write(buf, ec); // killed in here
        return 0;
    });
    std::error_code ec;
    auto s = vt::accept_one(l);
    std::vector<std::byte> buf(256 * 1024);
    uint64_t got = 0;
    auto t0 = vipl::Clock::now();
    bool killed = false;
    while (!ec && vipl::Clock::now() - t0 < 15s) {
        if (!killed && got >= (4u << 20)) {
            kill(pid, SIGKILL);
            killed = true;
        }
        got += s.read(buf, ec); // no deadline: straight into buf
    }
    CHECK(killed);
    CHECK(ec == std::errc::connection_reset);
    CHECK(got < (64u << 20));
    vt::wait_child(pid);
}

// Run by hand: vipl-common-tests "[.zcopy-bench]" (prints MB/s, asserts nothing timed).
// ZC_BENCH_WRITE sets the write size (1 MiB), ZC_BENCH_URI the provider (vipl+shm://...).
TEST_CASE("stream: 1 MiB writes with and without zero copy", "[.zcopy-bench]") {
    const char *env = getenv("ZC_BENCH_WRITE");
    const size_t kWrite = env ? strtoul(env, nullptr, 0) : 1 << 20;
    const int kWrites = static_cast<int>((2000ull << 20) / kWrite);
    const char *uri = getenv("ZC_BENCH_URI");
    const std::string base = uri ? uri : "vipl+shm://127.0.0.1";
    for (uint32_t threshold : {0u, 1u, 0u, 1u}) {
        vipl::StreamOptions o;
        o.zcopy_threshold = threshold;
        auto l = vt::bind_free(base, o);
        int pid = vt::spawn_client(l.uri(), o, [&](vipl::Stream &s) {
            std::error_code ec;
            std::vector<std::byte> buf(kWrite);
            uint64_t got = 0;
            while (got < uint64_t(kWrite) * kWrites) {
                size_t n = s.read(buf, ec); // no deadline: regions go straight into buf
                if (ec || n == 0) return 3;
                got += n;
            }
            return s.close(deadline_in(10s)) ? 4 : 0;
        });
        std::error_code ec;
        auto s = vt::accept_one(l);
        std::vector<std::byte> buf(kWrite, std::byte{1});
        rusage r0{}, r1{}, c0{}, c1{};
        getrusage(RUSAGE_SELF, &r0);
        getrusage(RUSAGE_CHILDREN, &c0);
        auto t0 = vipl::Clock::now();
        for (int i = 0; i < kWrites; ++i) REQUIRE(vt::write_all(s, buf.data(), buf.size()));
        CHECK(!s.close(deadline_in(10s)));
        double secs = std::chrono::duration<double>(vipl::Clock::now() - t0).count();
        CHECK(vt::wait_child(pid) == 0);
        getrusage(RUSAGE_SELF, &r1);
        getrusage(RUSAGE_CHILDREN, &c1);
        std::printf("%s, %d writes of %zu KiB, %-9s: %5.0f MB/s, CPU writer %.2f s reader %.2f s\n",
                    base.c_str(), kWrites, kWrite / 1024, threshold ? "zero copy" : "copied",
                    kWrites * double(kWrite) / secs / 1e6, cpu(r1) - cpu(r0), cpu(c1) - cpu(c0));
    }
}
