// The run's address family: where servers listen, how clients connect, how addresses
// appear in a transcript, and the two network namespaces of the netns family.
#include "harness.h"

#include "vipl_stats.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace sockdiff {

namespace {

int g_ns_fd[2] = {-1, -1};
bool g_server_side = false;
std::vector<Addr> g_listeners; // where_text names them "listener 1", "listener 2"...
int g_names = 0;

void set_ns(int side) {
    if (setns(g_ns_fd[side], CLONE_NEWNET) != 0)
        fatal("setns into %s: %s", run().ns_path[side].c_str(), strerror(errno));
}

// Sockets made while it lives belong to the server's namespace (the netns family).
class ServerPlace {
public:
    ServerPlace() : switched_(run().family == Family::netns && !g_server_side) {
        if (switched_) set_ns(0);
    }
    ~ServerPlace() {
        if (switched_) set_ns(1);
    }

private:
    bool switched_;
};

void fresh_address(Addr *a) {
    *a = Addr{};
    Run &r = run();
    if (r.family == Family::unix_) {
        auto *un = reinterpret_cast<sockaddr_un *>(&a->ss);
        un->sun_family = AF_UNIX;
        std::string path = r.dir + "/sock" + std::to_string(++g_names);
        if (path.size() >= sizeof un->sun_path) fatal("socket path too long: %s", path.c_str());
        std::memcpy(un->sun_path, path.c_str(), path.size() + 1);
        a->len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
    } else if (r.family == Family::tcp6) {
        auto *in6 = reinterpret_cast<sockaddr_in6 *>(&a->ss);
        in6->sin6_family = AF_INET6;
        in6->sin6_addr = in6addr_loopback;
        a->len = sizeof *in6;
    } else {
        auto *in = reinterpret_cast<sockaddr_in *>(&a->ss);
        in->sin_family = AF_INET;
        const char *ip = r.family == Family::netns ? r.ip[0].c_str() : "127.0.0.1";
        if (inet_pton(AF_INET, ip, &in->sin_addr) != 1) fatal("bad address %s", ip);
        a->len = sizeof *in;
    }
}

int bound_socket(Addr *where, int flags) {
    ServerPlace place;
    int fd = stream_socket(flags);
    Addr a;
    fresh_address(&a);
    if (run().tcp()) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    }
    if (bind(fd, a.sa(), a.len) != 0) fatal("bind: %s", strerror(errno));
    where->len = sizeof where->ss;
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&where->ss), &where->len) != 0)
        fatal("getsockname: %s", strerror(errno));
    return fd;
}

std::string ip_text(const sockaddr *sa) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in *>(sa)->sin_addr, buf, sizeof buf);
    else
        inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_addr, buf,
                  sizeof buf);
    return buf;
}

int port_of(const sockaddr *sa) {
    return sa->sa_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in *>(sa)->sin_port)
                                    : ntohs(reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_port);
}

} // namespace

Run &run() {
    static Run r;
    return r;
}

int Run::domain() const {
    switch (family) {
    case Family::unix_:
        return AF_UNIX;
    case Family::tcp6:
        return AF_INET6;
    default:
        return AF_INET;
    }
}

const char *family_name(Family f) {
    switch (f) {
    case Family::unix_:
        return "unix";
    case Family::tcp4:
        return "tcp4";
    case Family::tcp6:
        return "tcp6";
    case Family::netns:
        return "netns";
    }
    return "?";
}

bool family_from(const std::string &s, Family *f) {
    for (Family x : {Family::unix_, Family::tcp4, Family::tcp6, Family::netns})
        if (s == family_name(x)) {
            *f = x;
            return true;
        }
    return false;
}

void netns_enter_client(const std::string &spec, bool enter) {
    // "<server ns file>,<server ip>,<client ns file>,<client ip>" (compare.cc)
    Run &r = run();
    std::vector<std::string> parts;
    size_t p = 0;
    while (p <= spec.size()) {
        size_t q = spec.find(',', p);
        if (q == std::string::npos) q = spec.size();
        parts.push_back(spec.substr(p, q - p));
        p = q + 1;
    }
    if (parts.size() != 4) fatal("SOCKDIFF_NETNS=%s: expected 4 fields", spec.c_str());
    r.ns_path[0] = parts[0];
    r.ip[0] = parts[1];
    r.ns_path[1] = parts[2];
    r.ip[1] = parts[3];
    if (!enter) return;
    for (int s = 0; s < 2; ++s) {
        g_ns_fd[s] = open(r.ns_path[s].c_str(), O_RDONLY | O_CLOEXEC);
        if (g_ns_fd[s] < 0) fatal("%s: %s", r.ns_path[s].c_str(), strerror(errno));
    }
    set_ns(1);
}

void enter_server_side() {
    if (run().family == Family::netns && !g_server_side) set_ns(0);
    g_server_side = true;
}

int stream_socket(int flags, bool may_fail) {
    int fd = socket(run().domain(), SOCK_STREAM | flags, 0);
    if (fd < 0 && !may_fail) fatal("socket: %s", strerror(errno));
    return fd;
}

void no_delay(int fd) {
    if (!run().tcp()) return;
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        check(false, "TCP_NODELAY: %s", strerror(errno));
}

int make_listener(Addr *where, int sock_flags) {
    int fd = bound_socket(where, sock_flags);
    if (listen(fd, 16) != 0) fatal("listen: %s", strerror(errno));
    note_listener(*where);
    return fd;
}

int make_unlistened(Addr *where) {
    return bound_socket(where, 0);
}

void note_listener(const Addr &a) {
    g_listeners.push_back(a);
}

int dial(const Addr &where, int sock_flags) {
    int fd = stream_socket(sock_flags);
    for (;;) {
        if (connect(fd, where.sa(), where.len) == 0) break;
        if (errno == EINTR) continue;
        fatal("connect: %s", strerror(errno));
    }
    no_delay(fd);
    return fd;
}

int accept_one(int lfd, int flags) {
    if (!(wait_for(lfd, POLLIN, kWaitMs) & POLLIN)) fatal("no connection to accept");
    int fd = accept4(lfd, nullptr, nullptr, flags);
    if (fd < 0) fatal("accept4: %s", strerror(errno));
    no_delay(fd);
    return fd;
}

std::string where_text(const sockaddr *sa, socklen_t len) {
    if (len < static_cast<socklen_t>(sizeof(sa_family_t))) return "no address";
    if (sa->sa_family == AF_UNIX) {
        auto *un = reinterpret_cast<const sockaddr_un *>(sa);
        if (len <= static_cast<socklen_t>(offsetof(sockaddr_un, sun_path))) return "unnamed";
        if (un->sun_path[0] == '\0') return "abstract";
        for (size_t i = 0; i < g_listeners.size(); ++i) {
            auto *l = reinterpret_cast<const sockaddr_un *>(&g_listeners[i].ss);
            if (std::strcmp(l->sun_path, un->sun_path) == 0)
                return "path of listener " + std::to_string(i + 1);
        }
        return "another path";
    }
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
        return "family " + std::to_string(sa->sa_family);
    std::string ip = ip_text(sa);
    const Run &r = run();
    if (r.family == Family::netns) {
        if (ip == r.ip[0])
            ip = "server ip";
        else if (ip == r.ip[1])
            ip = "client ip";
    }
    int port = port_of(sa);
    std::string p = port == 0 ? "port 0" : "another port";
    for (size_t i = 0; i < g_listeners.size(); ++i)
        if (g_listeners[i].ss.ss_family == sa->sa_family && port_of(g_listeners[i].sa()) == port)
            p = "port of listener " + std::to_string(i + 1);
    return std::string(sa->sa_family == AF_INET ? "inet " : "inet6 ") + ip + ", " + p;
}

std::string addr_hex(const Addr &a) {
    static const char digits[] = "0123456789abcdef";
    std::string s;
    auto *b = reinterpret_cast<const uint8_t *>(&a.ss);
    for (socklen_t i = 0; i < a.len; ++i) {
        s += digits[b[i] >> 4];
        s += digits[b[i] & 15];
    }
    return s;
}

Addr addr_from_hex(const std::string &s) {
    Addr a;
    auto *b = reinterpret_cast<uint8_t *>(&a.ss);
    auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    for (size_t i = 0; i + 1 < s.size() && i / 2 < sizeof a.ss; i += 2)
        b[i / 2] = static_cast<uint8_t>(nib(s[i]) << 4 | nib(s[i + 1]));
    a.len = static_cast<socklen_t>(s.size() / 2);
    return a;
}

void expect_carried(int fd, const char *what) {
    using vipl::db::test::Carrier;
    Carrier c = vipl::db::test::carrier_of(fd);
    const char *name = vipl::db::test::carrier_name(c);
    if (!run().expect_vipl) {
        if (c != Carrier::none) {
            note("FAILED: %s (fd %d) is interposed (%s) in a plain run", what, fd, name);
            count_failure();
        }
        return;
    }
    Carrier want = run().family == Family::netns ? Carrier::tcp : Carrier::shm;
    if (c == want) {
        note("%s (fd %d) rides %s", what, fd, name);
    } else {
        note("FAILED: %s (fd %d) rides %s, not %s", what, fd, name,
             vipl::db::test::carrier_name(want));
        count_failure();
    }
}

} // namespace sockdiff
