// The wait fd, signals, and many connections at once.
#include "helpers.h"

#include <poll.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <thread>

using namespace std::chrono_literals;
using vipl::deadline_in;

namespace {

// Drains a non-blocking stream until it would block; returns the bytes read.
size_t drain(vipl::Stream &s, std::string *out = nullptr) {
    std::byte buf[4096];
    size_t total = 0;
    for (;;) {
        std::error_code ec;
        size_t n = s.read(buf, ec);
        if (ec || n == 0) return total;
        if (out) out->append(reinterpret_cast<const char *>(buf), n);
        total += n;
    }
}

void on_alarm(int) {}

} // namespace

TEST_CASE("stream: the wait fd polls readable exactly when data is there") {
    std::string base = CT_PROVIDER();
    auto p = vt::connect_pair(base);
    p.server.set_nonblocking(true);
    int fd = p.server.fd();
    REQUIRE(fd >= 0);
    drain(p.server); // takes the initial credit grant
    CHECK(!vt::readable(fd, 0));

    std::error_code ec;
    std::thread writer([&] {
        std::this_thread::sleep_for(100ms);
        std::byte b[300];
        std::memset(b, 'a', sizeof b);
        p.client.write(b, ec);
    });
    CHECK(vt::readable(fd, 3000));
    writer.join();
    // Read a part only: the rest is held by the stream, the fd must stay readable.
    std::byte one[100];
    CHECK(p.server.read(one, ec) == 100);
    CHECK(vt::readable(fd, 0));
    CHECK(drain(p.server) == 200);
    CHECK(!vt::readable(fd, 0));

    // End of stream is readable too.
    std::thread closer([&] { p.client.shutdown_write(ec); });
    closer.join();
    CHECK(vt::readable(fd, 3000));
    CHECK(p.server.read(one, ec) == 0);
    CHECK(!ec);
    CHECK(vt::readable(fd, 0));
}

TEST_CASE("stream: a blocking read interrupted by a signal returns interrupted, losing nothing") {
    std::string base = CT_PROVIDER();
    auto p = vt::connect_pair(base);
    struct sigaction sa {};
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART; // VIPL-style calls end anyway
    struct sigaction old {};
    sigaction(SIGALRM, &sa, &old);
    itimerval t{};
    t.it_value.tv_usec = 100000;
    setitimer(ITIMER_REAL, &t, nullptr);
    std::byte buf[64];
    std::error_code ec;
    auto t0 = vipl::Clock::now();
    CHECK(p.server.read(buf, deadline_in(5s), ec) == 0);
    CHECK(ec == std::errc::interrupted);
    CHECK(vipl::Clock::now() - t0 < 4s);
    sigaction(SIGALRM, &old, nullptr);

    std::byte msg[5] = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}, std::byte{5}};
    CHECK(p.client.write(msg, ec) == 5);
    CHECK(p.server.read(buf, deadline_in(5s), ec) == 5);
    CHECK(!ec);
    CHECK(std::memcmp(buf, msg, 5) == 0);
}

TEST_CASE("stream: 64 concurrent connections, served with poll()") {
    std::string base = CT_PROVIDER();
    constexpr int kConns = 64;
    constexpr size_t kBytes = 48 * 1024;
    vipl::StreamOptions o;
    o.recv_buffers = 4;
    o.buffer_size = 8 * 1024;
    o.send_buffers = 4;
    o.nonblocking = true;
    auto l = vt::bind_free(base, o);
    int pid = vt::spawn([&] {
        vipl::StreamOptions co = o;
        co.nonblocking = false;
        std::vector<vipl::Stream> conns;
        for (int i = 0; i < kConns; ++i) {
            std::error_code ec;
            conns.push_back(vipl::Stream::connect(l.uri(), deadline_in(10s), ec, co));
            if (ec) return 10;
        }
        std::vector<std::byte> buf(kBytes);
        // Interleave: 4 KiB to each connection in turn.
        for (size_t off = 0; off < kBytes; off += 4096)
            for (int i = 0; i < kConns; ++i) {
                vt::fill(buf.data(), 4096, off, i);
                if (!vt::write_all(conns[i], buf.data(), 4096)) return 11;
            }
        for (auto &c : conns)
            if (c.close(deadline_in(20s))) return 12;
        return 0;
    });
    std::vector<vipl::Stream> conns;
    for (int i = 0; i < kConns; ++i) {
        std::error_code ec;
        conns.push_back(l.accept(deadline_in(10s), ec));
        REQUIRE(!ec);
    }
    std::vector<uint64_t> got(kConns, 0);
    std::vector<bool> eof(kConns, false);
    int open = kConns;
    std::vector<std::byte> buf(10000);
    auto end = vipl::Clock::now() + 30s;
    while (open > 0 && vipl::Clock::now() < end) {
        std::vector<pollfd> fds;
        for (int i = 0; i < kConns; ++i) fds.push_back({conns[i].fd(), POLLIN, 0});
        REQUIRE(poll(fds.data(), fds.size(), 5000) > 0);
        for (int i = 0; i < kConns; ++i) {
            if (eof[i] || !(fds[i].revents & POLLIN)) continue;
            for (;;) {
                std::error_code ec;
                size_t n = conns[i].read(buf, ec);
                if (ec == std::errc::operation_would_block) break;
                REQUIRE(!ec);
                if (n == 0) {
                    eof[i] = true;
                    --open;
                    break;
                }
                REQUIRE(vt::check(buf.data(), n, got[i], i) == -1);
                got[i] += n;
            }
        }
    }
    CHECK(open == 0);
    for (int i = 0; i < kConns; ++i) CHECK(got[i] == kBytes);
    CHECK(vt::wait_child(pid) == 0);
}
