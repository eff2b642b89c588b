// Garbage sent to the server's port, over TCP and the unix socket: random bytes of every
// size, the interconnect's own HELLO broken, cut short, whole but never followed by the
// client's stream, whole and followed by garbage or by silence; and garbage from a
// client under the interposer, whose bytes ride vipl into the backend.  Each connection
// is closed by the server within a bound; afterwards the same postmaster serves clients
// that ride vipl, and holds no more than before.
#include "evidence.h"
#include "hello.h"
#include "psql.h"

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <random>

using namespace pgt;

namespace {

int dial(const PgCluster &pg, bool tcp) {
    int fd;
    if (tcp) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(pg.port()));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0);
    } else {
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::string path = pg.socket_dir() + "/.s.PGSQL." + std::to_string(pg.port());
        REQUIRE(path.size() < sizeof a.sun_path);
        std::copy(path.begin(), path.end(), a.sun_path);
        REQUIRE(connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0);
    }
    return fd;
}

// Sends bytes (the server may close before taking them all), half-closes when asked,
// then reads until the server ends the connection; false when it did not within ms.
bool server_closes(const PgCluster &pg, bool tcp, const std::vector<uint8_t> &bytes,
                   bool half_close, int ms = 10000) {
    int fd = dial(pg, tcp);
    size_t off = 0;
    while (off < bytes.size()) {
        ssize_t n = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
    }
    if (half_close) shutdown(fd, SHUT_WR);
    uint64_t deadline = now_ns() + static_cast<uint64_t>(ms) * 1000000ull;
    bool closed = false;
    char buf[4096];
    while (!closed && now_ns() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        closed = n <= 0;
    }
    close(fd);
    return closed;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 r(seed);
    std::vector<uint8_t> v(n);
    for (uint8_t &b : v) b = static_cast<uint8_t>(r());
    return v;
}

std::vector<uint8_t> valid_hello(uint32_t seed) {
    vipl::db::Hello h;
    h.provider = vipl::db::Provider::shm;
    std::vector<uint8_t> t = random_bytes(32, seed);
    std::copy(t.begin(), t.begin() + 16, h.token);
    std::copy(t.begin() + 16, t.end(), h.secret);
    h.buffer_size = 32768;
    std::vector<uint8_t> out(vipl::db::kHelloSize);
    vipl::db::encode_hello(h, out.data());
    return out;
}

} // namespace

TEST_CASE("pg faults: garbage sent to the server's port", "[pg][faults][garbage]") {
    ClusterConfig c;
    c.conf = {"authentication_timeout = '3s'"};
    PgCluster pg(c);
    const int pm = pg.postmaster_pid();
    const Footprint before = postmaster_baseline(pg);

    for (bool tcp : {false, true}) {
        INFO((tcp ? "TCP 127.0.0.1" : "unix socket"));
        uint32_t seed = tcp ? 100 : 200;
        for (size_t n : {1u, 3u, 8u, 100u, 65536u, 1u << 20}) {
            INFO(n << " random bytes, then a half-close");
            CHECK(server_closes(pg, tcp, random_bytes(n, ++seed), true));
        }
        std::vector<uint8_t> hello = valid_hello(++seed);
        std::vector<uint8_t> broken = hello;
        broken[40] ^= 0x5a; // the check no longer holds
        CHECK(server_closes(pg, tcp, broken, true));
        CHECK(server_closes(pg, tcp, {hello.begin(), hello.begin() + 30}, true));
        CHECK(server_closes(pg, tcp, hello, true));
        std::vector<uint8_t> then_garbage = valid_hello(++seed);
        std::vector<uint8_t> g = random_bytes(200, ++seed);
        then_garbage.insert(then_garbage.end(), g.begin(), g.end());
        CHECK(server_closes(pg, tcp, then_garbage, false));
        // A whole hello, then silence: the server gives up on the stream, then on the
        // startup packet (authentication_timeout).
        CHECK(server_closes(pg, tcp, valid_hello(++seed), false, 15000));
    }

    // Garbage from a client under the interposer, riding vipl into a backend: it asks
    // for TLS as libpq does, reads the server's 'N' (the stream is up by then), then sends
    // 64 KiB of 0xff as its startup packet; the backend refuses it and closes.
    for (bool tcp : {false, true}) {
        INFO((tcp ? "TCP 127.0.0.1" : "unix socket"));
        std::string host =
            tcp ? "127.0.0.1" : pg.socket_dir() + "/.s.PGSQL." + std::to_string(pg.port());
        Launch l =
            pg.client({PGT_GARBAGE_CLIENT, host, tcp ? std::to_string(pg.port()) : "0", "65536"});
        l.in_pipe = true;
        l.out_pipe = true;
        Program p(l);
        REQUIRE(p.read_until(" eof ", 15000) != std::string::npos);
        REQUIRE(p.read_until("\n", 1000) != std::string::npos);
        INFO(p.output());
        CHECK(p.output().find("answer N eof ") != std::string::npos);
        CHECK(p.output().find("timeout") == std::string::npos);
        std::vector<StatRow> rows = table(p.pid());
        INFO(describe(p.pid(), rows));
        REQUIRE(rows.size() == 1);
        CHECK(rows[0].carrier == Carrier::shm);
        CHECK(rows[0].bytes_out >= 8);
        p.close_in();
        REQUIRE(p.wait(5000) == 0);
    }
    INFO(pg.log());
    CHECK(pg.log().find("invalid length of startup packet") != std::string::npos);
    CHECK(pg.log().find("terminated by signal") == std::string::npos);
    REQUIRE(pg.postmaster_pid() == pm);
    require_footprint(pm, before, 10000);
    Psql after(pg, pg.tcp_conninfo());
    REQUIRE(after.query("SELECT 6 * 7;") == "42");
    require_carried(after.pid(), Role::client, Carrier::shm);
    require_carried(after.backend_pid(), Role::server, Carrier::shm);
}
