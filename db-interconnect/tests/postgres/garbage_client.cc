// A client that speaks PostgreSQL's first step and then garbage, for the garbage test
// (garbage_test.cc) to run under the interposer: it connects to HOST PORT (or a unix
// socket path given as HOST with PORT 0), sends an SSLRequest as libpq does and reads the
// one-byte answer (the connection's negotiation is over by then), then sends BYTES bytes
// of 0xff as its startup packet, reads until the server ends the connection, prints
// "answer <c> eof <how>" and waits for its standard input to end before it exits, so that
// the test can read its connection table meanwhile.  Plain socket calls only (stdio on a
// socket bypasses any interposer: glibc calls its own write).
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int dial(const char *host, const char *port) {
    if (std::strcmp(port, "0") == 0) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::snprintf(a.sun_path, sizeof a.sun_path, "%s", host);
        return connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 ? fd : -1;
    }
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0) return -1;
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    int r = connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return r == 0 ? fd : -1;
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s HOST PORT BYTES\n", argv[0]);
        return 2;
    }
    int fd = dial(argv[1], argv[2]);
    if (fd < 0) {
        std::fprintf(stderr, "connect: %s\n", std::strerror(errno));
        return 1;
    }
    const unsigned char ssl_request[8] = {0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f};
    if (send(fd, ssl_request, sizeof ssl_request, MSG_NOSIGNAL) != 8) return 1;
    char answer = '?';
    if (recv(fd, &answer, 1, 0) != 1) return 1;
    std::vector<char> garbage(std::strtoul(argv[3], nullptr, 10), '\xff');
    size_t off = 0;
    while (off < garbage.size()) {
        ssize_t n = send(fd, garbage.data() + off, garbage.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break; // the server may close before taking it all
        off += static_cast<size_t>(n);
    }
    std::string how = "timeout";
    char buf[4096];
    for (int i = 0; i < 200; ++i) { // 10 s
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0) how = "end";
        if (n < 0) how = std::strerror(errno);
        if (n <= 0) break;
    }
    std::printf("answer %c eof %s\n", answer, how.c_str());
    std::fflush(stdout);
    while (read(0, buf, sizeof buf) > 0) {
    }
    close(fd);
    return 0;
}
