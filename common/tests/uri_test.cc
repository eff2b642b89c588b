#include "vipl/uri.h"

#include <catch2/catch.hpp>

#include <unistd.h>

using vipl::Transport;
using vipl::Uri;

TEST_CASE("uri: valid forms parse and print back") {
    std::error_code ec;
    Uri u = Uri::parse("vipl://localhost:5432", ec);
    REQUIRE(!ec);
    CHECK(u.transport == Transport::automatic);
    CHECK(u.host == "localhost");
    CHECK(u.port == 5432);
    CHECK(u.to_string() == "vipl://localhost:5432");

    u = Uri::parse("VIPL+TCP://[::1]:80/", ec);
    REQUIRE(!ec);
    CHECK(u.transport == Transport::tcp);
    CHECK(u.host == "::1");
    CHECK(u.to_string() == "vipl+tcp://[::1]:80");

    u = Uri::parse("vipl+shm://127.0.0.1:65535", ec);
    REQUIRE(!ec);
    CHECK(u.transport == Transport::shm);
    CHECK(u.port == 65535);
    CHECK(Uri::parse(u.to_string(), ec) == u);
}

TEST_CASE("uri: the port maps to a two-byte big-endian discriminator") {
    std::error_code ec;
    Uri u = Uri::parse("vipl://h.example:5432", ec);
    REQUIRE(!ec);
    auto d = u.discriminator();
    CHECK(d[0] == 0x15);
    CHECK(d[1] == 0x38);
}

TEST_CASE("uri: automatic provider is shm for this host, tcp for others") {
    std::error_code ec;
    for (const char *local : {"vipl://localhost:1", "vipl://127.0.0.1:1", "vipl://[::1]:1"}) {
        Uri u = Uri::parse(local, ec);
        REQUIRE(!ec);
        CHECK(u.resolved() == Transport::shm);
        CHECK(u.connect_device() == "shm0");
    }
    char name[256] = {};
    REQUIRE(gethostname(name, sizeof name - 1) == 0);
    Uri mine = Uri::parse(std::string("vipl://") + name + ":7", ec);
    REQUIRE(!ec);
    CHECK(mine.resolved() == Transport::shm);

    Uri far = Uri::parse("vipl://192.0.2.77:7", ec);
    REQUIRE(!ec);
    CHECK(far.resolved() == Transport::tcp);
    CHECK(far.connect_device() == "tcp0");
    CHECK(far.listen_device() == "tcp:192.0.2.77");

    Uri lo = Uri::parse("vipl+tcp://127.0.0.1:7", ec);
    REQUIRE(!ec);
    CHECK(lo.resolved() == Transport::tcp);
    CHECK(lo.connect_device() == "tcp:127.0.0.1");
    CHECK(lo.listen_device() == "tcp:127.0.0.1");
    CHECK(Uri::parse("vipl+tcp://[::1]:7", ec).connect_device() == "tcp:::1");
    CHECK(Uri::parse("vipl+tcp://localhost:7", ec).connect_device() == "tcp:127.0.0.1");
    CHECK(Uri::parse("vipl+tcp://0.0.0.0:7", ec).listen_device() == "tcp0");
}

TEST_CASE("uri: malformed URIs are invalid_argument with a reason") {
    const char *bad[] = {
        "",
        "localhost:80",
        "http://localhost:80",
        "vipl+udp://localhost:80",
        "vipl://localhost",
        "vipl://localhost:",
        "vipl://:80",
        "vipl://localhost:65536",
        "vipl://localhost:12x",
        "vipl://localhost:80/path",
        "vipl://::1:80",
        "vipl://[::1:80",
        "vipl://[nothost]:80",
        "vipl://bad host:80",
        "vipl+shm://192.0.2.77:80",
        "vipl://localhost:80/svc",
        "vipl://localhost/ab",
        "vipl://localhost/abcdefghijklmnopqrstuvwxyz0123456",
        "vipl://localhost/a b c",
        "vipl://localhost/svc/x",
        "vipl://localhost/sv:c",
        "vipl://[::1]:80/svc",
        "vipl:///svc",
    };
    for (const char *text : bad) {
        std::error_code ec;
        std::string why;
        Uri u = Uri::parse(text, ec, &why);
        INFO(text);
        CHECK(ec == std::errc::invalid_argument);
        CHECK(why.find("vipl URI") == 0);
        CHECK(u.port == 0);
    }
}

TEST_CASE("uri: port 0 parses (a listener picks a port) and names no rendezvous") {
    std::error_code ec;
    Uri u = Uri::parse("vipl://localhost:0", ec);
    REQUIRE(!ec);
    CHECK(u.port == 0);
    CHECK_FALSE(u.has_discriminator());
    CHECK(Uri::parse("vipl://localhost:1", ec).has_discriminator());
}

TEST_CASE("uri: a service name replaces the port and is the discriminator") {
    std::error_code ec;
    Uri u = Uri::parse("vipl+shm://localhost/pg-5432.77_a", ec);
    REQUIRE(!ec);
    CHECK(u.transport == Transport::shm);
    CHECK(u.host == "localhost");
    CHECK(u.port == 0);
    CHECK(u.service == "pg-5432.77_a");
    CHECK(u.has_discriminator());
    auto d = u.discriminator();
    CHECK(std::string(d.begin(), d.end()) == "pg-5432.77_a");
    CHECK(u.to_string() == "vipl+shm://localhost/pg-5432.77_a");
    CHECK(Uri::parse(u.to_string(), ec) == u);

    u = Uri::parse("VIPL+TCP://[::1]/abc/", ec);
    REQUIRE(!ec);
    CHECK(u.host == "::1");
    CHECK(u.service == "abc");
    CHECK(u.to_string() == "vipl+tcp://[::1]/abc");
    CHECK(Uri::parse("vipl://h.example/" + std::string(32, 'x'), ec).service.size() == 32);
    CHECK(!ec);

    // A service set in the structure wins over a port there too.
    Uri both;
    both.host = "localhost";
    both.port = 5432;
    both.service = "svc";
    auto b = both.discriminator();
    CHECK(std::string(b.begin(), b.end()) == "svc");
    CHECK(both.to_string() == "vipl://localhost/svc");
    CHECK(vipl::valid_service("abc"));
    CHECK_FALSE(vipl::valid_service("ab"));
    CHECK_FALSE(vipl::valid_service("a/c"));
}
