// Listener: a free port for port 0, service names instead of ports, the readiness
// descriptor, and an accept that never sleeps past its deadline.
#include "helpers.h"

#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <thread>

using namespace std::chrono_literals;
using vipl::deadline_in;

namespace {

// Voluntary context switches of this thread so far: one each time it blocked.
long voluntary_switches() {
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_nvcsw;
}

// Accepts through fd() as an event loop does: wait for readability, then accept without
// waiting; a wake-up may come before the whole request has, then the loop waits again.
vipl::Stream accept_by_fd(vipl::Listener &l) {
    for (int round = 0; round < 100; ++round) {
        REQUIRE(vt::readable(l.fd(), 10000));
        std::error_code ec;
        auto s = l.accept(vipl::Deadline{}, ec);
        if (s) return s;
        REQUIRE(ec == std::errc::timed_out);
    }
    FAIL("fd() kept waking with nothing to accept");
    return {};
}

} // namespace

TEST_CASE("listener: port 0 picks a free port in 20000..60999 and uri() names it") {
    std::string base = CT_PROVIDER();
    std::error_code ec;
    std::set<uint16_t> ports;
    std::vector<vipl::Listener> ls;
    for (int i = 0; i < 4; ++i) {
        ls.push_back(vipl::Listener::bind(base + ":0", ec));
        REQUIRE(!ec);
        uint16_t port = ls.back().uri().port;
        CHECK(port >= 20000);
        CHECK(port <= 60999);
        ports.insert(port);
        CHECK(ls.back().local_address().port == port);
    }
    CHECK(ports.size() == ls.size());
    // The port is really this listener's: binding it again is refused, connecting works.
    auto again = vipl::Listener::bind(ls[0].uri(), ec);
    CHECK(ec == std::errc::address_in_use);
    CHECK_FALSE(again.is_open());
    int pid = vt::spawn_client(ls[1].uri(), {}, [](vipl::Stream &s) {
        std::error_code wec;
        std::byte b{42};
        return s.write({&b, 1}, wec) == 1 && !s.close(deadline_in(10s)) ? 0 : 3;
    });
    auto s = vt::accept_one(ls[1]);
    std::byte b{};
    CHECK(s.read({&b, 1}, deadline_in(10s), ec) == 1);
    CHECK(b == std::byte{42});
    CHECK(s.read({&b, 1}, deadline_in(10s), ec) == 0); // its close: answered by reading
    CHECK(vt::wait_child(pid) == 0);
}

TEST_CASE("listener: fd() is readable exactly while a request waits, then accept() takes it") {
    std::string base = CT_PROVIDER();
    CHECK(vipl::Listener().fd() == -1);
    auto l = vt::bind_free(base);
    REQUIRE(l.fd() >= 0);
    CHECK_FALSE(vt::readable(l.fd(), 0));
    CHECK_FALSE(vt::readable(l.fd(), 50));
    constexpr int kClients = 3;
    std::vector<int> pids;
    for (int k = 0; k < kClients; ++k)
        pids.push_back(vt::spawn_client(l.uri(), {}, [k](vipl::Stream &s) {
            std::error_code ec;
            std::byte b{static_cast<unsigned char>(k)};
            return s.write({&b, 1}, ec) == 1 && !s.close(deadline_in(10s)) ? 0 : 3;
        }));
    std::set<int> seen;
    for (int k = 0; k < kClients; ++k) {
        auto s = accept_by_fd(l);
        std::error_code ec;
        std::byte b{};
        REQUIRE(s.read({&b, 1}, deadline_in(10s), ec) == 1);
        seen.insert(static_cast<int>(b));
    }
    CHECK(seen.size() == kClients);
    std::error_code ec;
    CHECK(!l.accept(vipl::Deadline{}, ec));
    CHECK(ec == std::errc::timed_out);
    CHECK_FALSE(vt::readable(l.fd(), 0));
    for (int pid : pids) CHECK(vt::wait_child(pid) == 0);
}

TEST_CASE("listener: accept() with a past deadline never sleeps") {
    std::string base = CT_PROVIDER();
    auto l = vt::bind_free(base);
    std::error_code ec;
    CHECK(!l.accept(vipl::Deadline{}, ec)); // warm up: first-use allocations
    long before = voluntary_switches();
    for (int i = 0; i < 200; ++i) {
        CHECK(!l.accept(i % 2 ? vipl::Deadline{} : vipl::Clock::now() - 1s, ec));
        CHECK(ec == std::errc::timed_out);
    }
    // Blocking in the kernel (a poll with a timeout, a sleep) is a voluntary switch.
    CHECK(voluntary_switches() == before);
}

TEST_CASE("listener and stream: a service name in place of a port") {
    std::string base = CT_PROVIDER();
    std::string svc = "svc-" + std::to_string(getpid()) + "-" + std::to_string(rand() % 100000);
    std::error_code ec;
    auto l = vipl::Listener::bind(base + "/" + svc, ec);
    REQUIRE(!ec);
    CHECK(l.uri().service == svc);
    CHECK(l.uri().to_string() == base + "/" + svc);
    CHECK(l.local_address().service == svc);
    // A second listener on another name, and the first name again: refused.
    auto other = vipl::Listener::bind(base + "/" + svc + "-b", ec);
    REQUIRE(!ec);
    auto dup = vipl::Listener::bind(base + "/" + svc, ec);
    CHECK(ec == std::errc::address_in_use);

    // Each name reaches its own listener, from another process.
    int pid = vt::spawn([&] {
        for (const std::string &name : {svc, svc + "-b"}) {
            std::error_code cec;
            auto s = vipl::Stream::connect(base + "/" + name, deadline_in(10s), cec);
            if (cec) return 2;
            if (s.write(std::as_bytes(std::span(name)), cec) != name.size()) return 3;
            if (s.close(deadline_in(10s))) return 4;
        }
        return 0;
    });
    for (vipl::Listener *x : {&l, &other}) {
        auto s = vt::accept_one(*x);
        std::string got;
        char buf[64];
        for (int i = 0; i < 100; ++i) {
            size_t n = s.read(std::as_writable_bytes(std::span(buf)), deadline_in(10s), ec);
            if (n == 0) break;
            got.append(buf, n);
        }
        CHECK(got == x->uri().service);
        CHECK(s.local_address().service == x->uri().service);
    }
    CHECK(vt::wait_child(pid) == 0);
    // A name nobody serves is refused.
    auto s = vipl::Stream::connect(base + "/nobody-" + svc, deadline_in(2s), ec);
    CHECK(!s);
    CHECK(ec == std::errc::connection_refused);
}
