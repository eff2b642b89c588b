// cancel-storm: a client that makes connections in its main loop while its SIGINT handler
// makes connections of its own, as a libpq program does when the user presses Ctrl-C
// (PQcancel runs in the handler: socket, blocking connect, 16 bytes, read until EOF,
// close, with nothing but async-signal-safe calls).
//
// usage: cancel-storm (--tcp HOST:PORT | --unix PATH) [--no-restart]
//
// The main loop keeps one blocking connection open for its whole life and, at every
// turn, exchanges 1 KiB on it and opens a new connection the way libpq does
// (non-blocking, connect + poll + SO_ERROR, send/recv + poll) to exchange 8 KiB.  Every
// exchange goes to an echo server and is checked byte for byte; a cancel request is
// "CANCEL" and a 10-digit number, answered by the server with EOF.  It prints "ready"
// after its first turn, stops once stdin is readable (closed), and prints
//   "handlers=N handler_failures=F handler_max_us=M turns=T turn_failures=G"
// (M: the longest a cancel request took, connect to EOF)
// leaving with status 0 when nothing failed.  --no-restart installs the handler without
// SA_RESTART, so every blocking call of the main loop may end with EINTR.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

sockaddr_storage g_addr;
socklen_t g_addr_len = 0;
volatile sig_atomic_t g_handlers = 0;
volatile sig_atomic_t g_handler_failures = 0;
volatile sig_atomic_t g_handler_max_us = 0; // the longest cancel request

long now_us() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<long>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

void fail_handler() {
    g_handler_failures = g_handler_failures + 1;
}

// The cancel request: only async-signal-safe calls, every one retried on EINTR.
void on_sigint(int) {
    int saved = errno;
    long t0 = now_us();
    unsigned n = static_cast<unsigned>(g_handlers);
    int fd = socket(g_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fail_handler();
        errno = saved;
        return;
    }
    int r;
    do r = connect(fd, reinterpret_cast<sockaddr *>(&g_addr), g_addr_len);
    while (r < 0 && errno == EINTR);
    char msg[16] = {'C', 'A', 'N', 'C', 'E', 'L'};
    for (int i = 15; i >= 6; --i, n /= 10) msg[i] = static_cast<char>('0' + n % 10);
    bool ok = r == 0;
    size_t sent = 0;
    while (ok && sent < sizeof msg) {
        ssize_t k = send(fd, msg + sent, sizeof msg - sent, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            ok = false;
        else
            sent += static_cast<size_t>(k);
    }
    // The server answers a cancel with EOF and nothing else.
    while (ok) {
        char c;
        ssize_t k = recv(fd, &c, 1, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k != 0) ok = false;
        break;
    }
    close(fd);
    if (ok)
        g_handlers = g_handlers + 1;
    else
        fail_handler();
    long took = now_us() - t0;
    if (took > g_handler_max_us) g_handler_max_us = static_cast<sig_atomic_t>(took);
    errno = saved;
}

bool parse(int argc, char **argv, bool *restart) {
    *restart = true;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--no-restart") {
            *restart = false;
        } else if (a == "--unix" && i + 1 < argc) {
            auto *un = reinterpret_cast<sockaddr_un *>(&g_addr);
            un->sun_family = AF_UNIX;
            std::strncpy(un->sun_path, argv[++i], sizeof un->sun_path - 1);
            g_addr_len = sizeof(sockaddr_un);
        } else if (a == "--tcp" && i + 1 < argc) {
            std::string hp = argv[++i];
            size_t c = hp.rfind(':');
            auto *in = reinterpret_cast<sockaddr_in *>(&g_addr);
            in->sin_family = AF_INET;
            in->sin_port = htons(static_cast<uint16_t>(std::atoi(hp.c_str() + c + 1)));
            if (c == std::string::npos ||
                inet_pton(AF_INET, hp.substr(0, c).c_str(), &in->sin_addr) != 1)
                return false;
            g_addr_len = sizeof(sockaddr_in);
        } else {
            return false;
        }
    }
    return g_addr_len != 0;
}

std::vector<char> payload(size_t n, uint32_t seed) {
    std::vector<char> v(n);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; ++i) {
        x = x * 1664525u + 1013904223u;
        v[i] = static_cast<char>(x >> 24);
    }
    v[0] = 'm'; // never "CANCEL"
    return v;
}

// Waits for `events` on fd, retrying EINTR (a bound of 10 s: a hang is a failure).
bool wait_for(int fd, short events) {
    for (int i = 0; i < 1000; ++i) {
        pollfd p{fd, events, 0};
        int r = poll(&p, 1, 10);
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) return false;
    }
    return false;
}

// libpq's way: non-blocking socket, connect in progress, poll, SO_ERROR.  A unix
// listener whose queue is full answers EAGAIN (nothing in progress): try again.
int connect_nonblocking() {
    for (int attempt = 0;; ++attempt) {
        int fd = socket(g_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return -1;
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        if (connect(fd, reinterpret_cast<sockaddr *>(&g_addr), g_addr_len) == 0) return fd;
        if (errno == EAGAIN && g_addr.ss_family == AF_UNIX && attempt < 100) {
            close(fd);
            usleep(1000);
            continue;
        }
        if (errno != EINPROGRESS && errno != EINTR) {
            close(fd);
            return -1;
        }
        int err = 0;
        socklen_t l = sizeof err;
        if (!wait_for(fd, POLLOUT) || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0 ||
            err != 0) {
            close(fd);
            return -1;
        }
        return fd;
    }
}

// Sends all and reads the echo back, over a blocking or a non-blocking socket.
bool exchange(int fd, const std::vector<char> &out, bool nonblocking) {
    size_t sent = 0, got = 0;
    std::vector<char> in(out.size());
    for (long rounds = 0; got < in.size(); ++rounds) {
        if (rounds > 10000000) return false;
        if (sent < out.size()) {
            ssize_t k = send(fd, out.data() + sent, out.size() - sent,
                             MSG_NOSIGNAL | (nonblocking ? 0 : MSG_DONTWAIT));
            if (k > 0)
                sent += static_cast<size_t>(k);
            else if (k < 0 && errno != EINTR && errno != EAGAIN)
                return false;
        }
        ssize_t k = recv(fd, in.data() + got, in.size() - got,
                         nonblocking || sent < out.size() ? MSG_DONTWAIT : 0);
        if (k > 0) {
            got += static_cast<size_t>(k);
            continue;
        }
        if (k == 0) return false;
        if (errno != EINTR && errno != EAGAIN) return false;
        if (errno == EAGAIN && !wait_for(fd, sent < out.size() ? POLLIN | POLLOUT : POLLIN))
            return false;
    }
    return in == out;
}

bool stop_asked() {
    pollfd p{0, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

} // namespace

int main(int argc, char **argv) {
    bool restart;
    if (!parse(argc, argv, &restart)) {
        std::fprintf(stderr, "usage: cancel-storm (--tcp HOST:PORT | --unix PATH) "
                             "[--no-restart]\n");
        return 2;
    }
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, nullptr) != 0) return 2;

    int persistent = -1;
    for (int i = 0; i < 100 && persistent < 0; ++i) {
        persistent = socket(g_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(persistent, reinterpret_cast<sockaddr *>(&g_addr), g_addr_len) != 0) {
            close(persistent);
            persistent = -1;
            usleep(10000);
        }
    }
    if (persistent < 0) return 3;
    long turns = 0, failures = 0;
    bool said = false;
    while (turns < 1000000 && !stop_asked()) {
        ++turns;
        bool ok = exchange(persistent, payload(1024, static_cast<uint32_t>(turns)), false);
        int fd = connect_nonblocking();
        ok = ok && fd >= 0 && exchange(fd, payload(8192, static_cast<uint32_t>(turns) + 7), true);
        if (fd >= 0) close(fd);
        if (!ok) ++failures;
        if (!said) {
            std::printf("ready\n");
            std::fflush(stdout);
            said = true;
        }
    }
    close(persistent);
    // Every handler run ends before the main loop looks at the counts: block SIGINT.
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, nullptr);
    std::printf("handlers=%d handler_failures=%d handler_max_us=%d turns=%ld turn_failures=%ld\n",
                static_cast<int>(g_handlers), static_cast<int>(g_handler_failures),
                static_cast<int>(g_handler_max_us), turns, failures);
    return g_handler_failures == 0 && failures == 0 ? 0 : 1;
}
