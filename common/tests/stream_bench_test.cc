// Round-trip latency of a stream between two processes, run by hand (hidden tag
// [.stream-bench]); it prints medians and asserts nothing timed.
//
//   vipl-common-tests "[.stream-bench]"      STREAM_BENCH_URI (vipl+shm://127.0.0.1),
//                                            STREAM_BENCH_ROUNDS (3), STREAM_BENCH_ITERS (20000),
//                                            STREAM_BENCH_MODES (modes whose name has it),
//                                            STREAM_BENCH_SAME=1 (both on CPU 0)
//
// The parent runs on CPU 0 and the echoing child on CPU 1 (when there are two).  Modes
// alternate within each round, so a drifting host shifts them alike.
#include "helpers.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

using namespace std::chrono_literals;
using vipl::deadline_in;

namespace {

struct Mode {
    const char *name;
    uint32_t spin_us;
    bool poll_fd; // non-blocking reads, poll() on fd() when they would block
    bool shareable = false;
    bool ready_fd = true;      // without: fd() is the VI's wait fd (read() said would-block)
    bool events_first = false; // asks events() before each read, sleeps when not POLLIN
};

const Mode kModes[] = {
    {"private, spin (10 us), blocking read", 10, false},
    {"private, no spin, blocking read", 0, false},
    {"private, no spin, poll(fd()) + non-blocking", 0, true},
    {"private, no spin, poll(VI fd), no ready_fd", 0, true, false, false},
    {"private, no spin, events() + poll(fd())", 0, true, false, true, true},
    {"private, no spin, events() + poll(VI fd), no ready_fd", 0, true, false, false, true},
    {"shareable, spin (10 us), blocking read", 10, false, true},
    {"shareable, no spin, blocking read", 0, false, true},
    {"shareable, no spin, poll(fd()) + non-blocking", 0, true, true},
};

void pin(int cpu) {
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

// Reads exactly buf.size() bytes the way the mode waits.
bool read_full(vipl::Stream &s, std::span<std::byte> buf, const Mode &m) {
    size_t got = 0;
    for (int spins = 0; got < buf.size() && spins < 1000000; ++spins) {
        if (m.events_first && !(s.events() & POLLIN)) {
            pollfd p{s.fd(), POLLIN, 0};
            poll(&p, 1, 5000);
            continue;
        }
        std::error_code ec;
        size_t n = s.read(buf.subspan(got), ec);
        if (ec == std::errc::operation_would_block) {
            pollfd p{s.fd(), POLLIN, 0};
            poll(&p, 1, 5000);
            continue;
        }
        if (ec || n == 0) return false;
        got += n;
    }
    return got == buf.size();
}

// Median round trip in ns of `iters` 8-byte exchanges.
double run(const std::string &base, const Mode &m, int iters) {
    vipl::StreamOptions o;
    o.spin_us = m.spin_us;
    o.shareable = m.shareable;
    o.ready_fd = m.ready_fd;
    auto l = vt::bind_free(base, o);
    const int peer_cpu = getenv("STREAM_BENCH_SAME") ? 0 : 1;
    int pid = vt::spawn_client(l.uri(), o, [&](vipl::Stream &s) {
        pin(peer_cpu);
        s.set_nonblocking(m.poll_fd);
        std::byte b[8];
        for (;;) {
            if (!read_full(s, b, m)) return 0; // the parent closed
            std::error_code ec;
            if (s.write(b, ec) != sizeof b) return 3;
        }
    });
    auto s = vt::accept_one(l);
    pin(0);
    s.set_nonblocking(m.poll_fd);
    std::byte b[8]{};
    std::vector<double> ns;
    ns.reserve(iters);
    for (int i = 0; i < iters + iters / 10; ++i) {
        auto t0 = vipl::Clock::now();
        std::error_code ec;
        REQUIRE(s.write(b, ec) == sizeof b);
        REQUIRE(read_full(s, b, m));
        auto t1 = vipl::Clock::now();
        if (i >= iters / 10)
            ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
    }
    s.close(deadline_in(5s));
    CHECK(vt::wait_child(pid) == 0);
    std::sort(ns.begin(), ns.end());
    return ns[ns.size() / 2];
}

} // namespace

TEST_CASE("stream: 8-byte round trips between two processes", "[.stream-bench]") {
    const char *uri = getenv("STREAM_BENCH_URI");
    const char *rounds_env = getenv("STREAM_BENCH_ROUNDS");
    const char *iters_env = getenv("STREAM_BENCH_ITERS");
    const std::string base = uri ? uri : "vipl+shm://127.0.0.1";
    const int rounds = rounds_env ? atoi(rounds_env) : 3;
    const int iters = iters_env ? atoi(iters_env) : 20000;
    const char *only = getenv("STREAM_BENCH_MODES");
    std::vector<Mode> modes;
    for (const Mode &m : kModes)
        if (!only || std::strstr(m.name, only)) modes.push_back(m);
    std::map<std::string, std::vector<double>> medians;
    for (int r = 0; r < rounds; ++r)
        for (const Mode &m : modes) {
            double med = run(base, m, iters);
            medians[m.name].push_back(med);
            std::printf("round %d  %-48s %8.2f us\n", r, m.name, med / 1000);
        }
    std::printf("%s, median of %d rounds, round trip:\n", base.c_str(), rounds);
    for (const Mode &m : modes) {
        auto v = medians[m.name];
        std::sort(v.begin(), v.end());
        std::printf("  %-48s %8.2f us\n", m.name, v[v.size() / 2] / 1000);
    }
}
