#include "endpoint.h"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace dbt {

namespace {

using Clock = std::chrono::steady_clock;

sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

int free_port() {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a = loopback(0);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0);
    socklen_t l = sizeof a;
    REQUIRE(getsockname(fd, reinterpret_cast<sockaddr *>(&a), &l) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

// Whether a TCP socket listens on 127.0.0.1:port (or any address, that port).
bool tcp_listening(const std::string &net, int port) {
    char want[16];
    std::snprintf(want, sizeof want, ":%04X", port);
    for (const char *file : {"/tcp", "/tcp6"}) {
        std::ifstream f(net + file);
        std::string line;
        std::getline(f, line);
        while (std::getline(f, line)) {
            std::istringstream in(line);
            std::string slot, local, remote, state;
            in >> slot >> local >> remote >> state;
            if (state == "0A" && local.size() > 5 && local.substr(local.size() - 5) == want)
                return true;
        }
    }
    return false;
}

// The paths of unix sockets that listen (flag __SO_ACCEPTCON) or are bound at all
// (abstract names start with '@').
bool unix_present(const std::string &net, const std::string &path, bool listening) {
    std::ifstream f(net + "/unix");
    std::string line;
    std::getline(f, line);
    while (std::getline(f, line)) {
        std::istringstream in(line);
        std::string num, refs, proto, flags, type, st, inode, p;
        in >> num >> refs >> proto >> flags >> type >> st >> inode >> p;
        if (p != path) continue;
        if (!listening || flags == "00010000") return true;
    }
    return false;
}

std::string unix_marker(const std::string &path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return "";
    return "@vipl-db/unix/" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

} // namespace

std::string Endpoint::socat_listen() const {
    return is_unix ? "UNIX-LISTEN:" + path
                   : "TCP4-LISTEN:" + std::to_string(port) + ",bind=" + host + ",reuseaddr";
}

std::string Endpoint::socat_connect() const {
    return is_unix ? "UNIX-CONNECT:" + path : "TCP4:" + host + ":" + std::to_string(port);
}

std::vector<std::string> Endpoint::args() const {
    if (is_unix) return {"--unix", path};
    return {"--tcp", host + ":" + std::to_string(port)};
}

Endpoint endpoint(bool is_unix, const std::string &dir, const std::string &tag) {
    Endpoint e;
    e.is_unix = is_unix;
    if (is_unix)
        e.path = dir + "/" + tag + ".sock";
    else
        e.port = free_port();
    return e;
}

void wait_listening(const Endpoint &e, bool marked, int ms, int pid) {
    std::string net = pid > 0 ? "/proc/" + std::to_string(pid) + "/net" : "/proc/net";
    auto dl = Clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
        bool up = e.is_unix ? unix_present(net, e.path, true) : tcp_listening(net, e.port);
        if (up && marked) {
            std::string port = std::to_string(e.port);
            if (e.is_unix)
                up = unix_present(net, unix_marker(e.path), false);
            else
                up = unix_present(net, "@vipl-db/tcp/" + e.host + ":" + port, false) ||
                     unix_present(net, "@vipl-db/tcp/*:" + port, false);
        }
        if (up) return;
        if (Clock::now() >= dl)
            FAIL("nothing listens on " << (e.is_unix ? e.path : std::to_string(e.port))
                                       << (marked ? " with a marker" : "") << " after " << ms
                                       << " ms");
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

int connect_to(const Endpoint &e) {
    int fd = socket(e.is_unix ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int r;
    if (e.is_unix) {
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strncpy(a.sun_path, e.path.c_str(), sizeof a.sun_path - 1);
        r = connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
    } else {
        sockaddr_in a = loopback(e.port);
        r = connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
    }
    if (r != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

std::string read_for(int fd, size_t want, int ms, int *end) {
    std::string got;
    *end = 0;
    auto dl = Clock::now() + std::chrono::milliseconds(ms);
    char buf[65536];
    while (got.size() < want) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(dl - Clock::now());
        if (left.count() <= 0) break;
        pollfd p{fd, POLLIN, 0};
        int r = poll(&p, 1, static_cast<int>(left.count()));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        ssize_t n = recv(fd, buf, std::min(sizeof buf, want - got.size()), 0);
        if (n > 0) {
            got.append(buf, static_cast<size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        *end = n == 0 ? 1 : errno;
        break;
    }
    return got;
}

bool send_all(int fd, const std::string &data) {
    size_t done = 0;
    while (done < data.size()) {
        ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += static_cast<size_t>(n);
    }
    return true;
}

} // namespace dbt
