// One process's end of a socket benchmark connection.  Blocking stream
// sockets: --variant unix (AF_UNIX socketpair) or tcp
// (TCP_NODELAY; loopback, or --server-host across network namespaces).  A stream cannot carry an
// empty message, so size 0 moves one byte.  Bandwidth streams with no window of its own: the socket
// buffers are the window, as for any program that writes to a socket.
#include "sock_peer.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

namespace bench {
namespace {

class SockPeer : public Peer {
public:
    SockPeer(int fd, uint64_t max) : fd_(fd), buf_(std::max<uint64_t>(max, 1)) {}
    ~SockPeer() override { ::close(fd_); }
    void ping(uint64_t size) override {
        size_t n = std::max<uint64_t>(size, 1);
        write_all(fd_, buf_.data(), n, "socket");
        read_all(fd_, buf_.data(), n, "socket");
    }
    void pong(uint64_t size) override {
        size_t n = std::max<uint64_t>(size, 1);
        read_all(fd_, buf_.data(), n, "socket");
        write_all(fd_, buf_.data(), n, "socket");
    }
    void stream_out(uint64_t size, long n) override {
        size_t len = std::max<uint64_t>(size, 1);
        for (long k = 0; k < n; ++k) write_all(fd_, buf_.data(), len, "socket");
        read_all(fd_, buf_.data(), 1, "socket");
    }
    void stream_in(uint64_t size, long n) override {
        size_t len = std::max<uint64_t>(size, 1);
        for (long k = 0; k < n; ++k) read_all(fd_, buf_.data(), len, "socket");
        write_all(fd_, buf_.data(), 1, "socket");
    }

private:
    int fd_;
    std::vector<uint8_t> buf_;
};

class SockTransport : public Transport {
public:
    void prepare(const Options &o) override {
        if (o.variant == "unix") {
            if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair_) != 0)
                fail("socketpair: %s", strerror(errno));
        } else if (o.variant == "unix-path") {
            // A listening socket file, as a server's: what an interposer can carry (a
            // socketpair has no server to tell it apart from a plain one).
            listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_un a{};
            a.sun_family = AF_UNIX;
            snprintf(a.sun_path, sizeof a.sun_path, "/tmp/bench-sock-%d.sock",
                     static_cast<int>(getpid()));
            unlink(a.sun_path);
            if (listen_fd_ < 0 ||
                bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
                listen(listen_fd_, 1) != 0)
                fail("unix listen: %s", strerror(errno));
            std::memcpy(&unix_addr_, &a, sizeof a);
        } else if (o.variant == "tcp" && !o.server_host.empty()) {
            // Across namespaces: the server listens once it is in its own.
        } else if (o.variant == "tcp") {
            listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            socklen_t len = sizeof a;
            if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), len) != 0 ||
                listen(listen_fd_, 1) != 0 ||
                getsockname(listen_fd_, reinterpret_cast<sockaddr *>(&addr_), &len) != 0)
                fail("tcp listen: %s", strerror(errno));
        } else {
            fail("--variant must be unix, unix-path or tcp");
        }
    }
    std::unique_ptr<Peer> open(const Options &o, bool server, int ctl) override {
        int fd;
        if (o.variant == "tcp" && !o.server_host.empty()) {
            fd = remote_tcp(o, server, ctl);
        } else if (o.variant == "unix") {
            fd = pair_[server ? 1 : 0];
            close(pair_[server ? 0 : 1]);
        } else if (server) {
            fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) fail("accept: %s", strerror(errno));
            close(listen_fd_);
            if (o.variant == "unix-path") unlink(unix_addr_.sun_path);
        } else if (o.variant == "unix-path") {
            close(listen_fd_);
            fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0 ||
                connect(fd, reinterpret_cast<sockaddr *>(&unix_addr_), sizeof unix_addr_) != 0)
                fail("unix connect: %s", strerror(errno));
        } else {
            close(listen_fd_);
            fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0 || connect(fd, reinterpret_cast<sockaddr *>(&addr_), sizeof addr_) != 0)
                fail("tcp connect: %s", strerror(errno));
        }
        if (o.variant == "tcp") {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        return std::make_unique<SockPeer>(fd, o.max_size());
    }

private:
    // The server listens on server_host (any port) and tells the client the port.
    static int remote_tcp(const Options &o, bool server, int ctl) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        if (inet_pton(AF_INET, o.server_host.c_str(), &a.sin_addr) != 1)
            fail("--server-host %s: not an IPv4 address", o.server_host.c_str());
        if (server) {
            int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            socklen_t len = sizeof a;
            if (l < 0 || bind(l, reinterpret_cast<sockaddr *>(&a), len) != 0 || listen(l, 1) != 0 ||
                getsockname(l, reinterpret_cast<sockaddr *>(&a), &len) != 0)
                fail("tcp listen on %s: %s", o.server_host.c_str(), strerror(errno));
            ctl_write(ctl, &a.sin_port, sizeof a.sin_port);
            int fd = accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) fail("accept: %s", strerror(errno));
            close(l);
            return fd;
        }
        ctl_read(ctl, &a.sin_port, sizeof a.sin_port);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0)
            fail("tcp connect to %s: %s", o.server_host.c_str(), strerror(errno));
        return fd;
    }

    int pair_[2] = {-1, -1};
    int listen_fd_ = -1;
    sockaddr_in addr_{};
    sockaddr_un unix_addr_{};
};

} // namespace

std::unique_ptr<Transport> sock_transport() {
    return std::make_unique<SockTransport>();
}

} // namespace bench
