#include "harness.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace bench {
namespace {

enum Op : uint32_t { kQuit = 0, kPong = 1, kStream = 2 };

struct Cmd {
    uint32_t op;
    uint32_t which; // the transport (run_paired: 0 or 1)
    uint64_t size;
    int64_t n;
};

uint64_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s) fail("bad size '%s'", s);
    if (*end == 'K' || *end == 'k') v *= 1024;
    if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
    if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
    return static_cast<uint64_t>(v);
}

std::vector<uint64_t> parse_list(const char *s) {
    std::vector<uint64_t> out;
    std::string list = s;
    size_t p = 0;
    while (p <= list.size()) {
        size_t q = list.find(',', p);
        if (q == std::string::npos) q = list.size();
        if (q > p) out.push_back(parse_size(list.substr(p, q - p).c_str()));
        p = q + 1;
    }
    return out;
}

Counters minus(const Counters &a, const Counters &b) {
    return {a.doorbells - b.doorbells, a.spin_wins - b.spin_wins, a.sleeps - b.sleeps};
}

void serve(Peer *const *peers, int npeers, int ctl) {
    for (;;) {
        Cmd c;
        ctl_read(ctl, &c, sizeof c);
        if (c.op == kQuit) return;
        if (c.which >= static_cast<uint32_t>(npeers)) fail("no transport %u", c.which);
        Peer &peer = *peers[c.which];
        Counters before = peer.counters();
        uint8_t ready = 1;
        ctl_write(ctl, &ready, 1);
        if (c.op == kPong) {
            for (int64_t k = 0; k < c.n; ++k) peer.pong(c.size);
            peer.finish();
        } else {
            peer.stream_in(c.size, c.n);
        }
        Counters d = minus(peer.counters(), before);
        ctl_write(ctl, &d, sizeof d);
    }
}

// One phase: the server is told what comes, then `body` runs on the client.
template <class F>
Counters phase(int ctl, Op op, uint64_t size, long n, F &&body, uint32_t which = 0) {
    Cmd c{op, which, size, n};
    ctl_write(ctl, &c, sizeof c);
    uint8_t ready;
    ctl_read(ctl, &ready, 1);
    body();
    Counters server;
    ctl_read(ctl, &server, sizeof server);
    return server;
}

// One-way latency in us from a list of round trips in ns (sorted here).
double percentile(std::vector<uint64_t> &v, int pct) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    size_t i = pct == 50 ? (n - 1) / 2 : std::min(n - 1, (n * pct + 99) / 100 - 1);
    return v[i] / 2e3;
}

void latency(const Options &o, Peer &peer, int ctl) {
    for (uint64_t size : o.sizes) {
        long warm = std::max(1L, o.warmup);
        uint64_t t0 = now_ns();
        phase(ctl, kPong, size, warm, [&] {
            for (long k = 0; k < warm; ++k) peer.ping(size);
        });
        double per = static_cast<double>(now_ns() - t0) / warm;
        long n = o.iters;
        if (per * n > o.max_ms * 1e6) n = std::max(20L, static_cast<long>(o.max_ms * 1e6 / per));
        std::vector<uint64_t> rtt(n);
        Counters mine = peer.counters();
        Counters server = phase(ctl, kPong, size, n, [&] {
            uint64_t prev = now_ns();
            for (long k = 0; k < n; ++k) {
                peer.ping(size);
                uint64_t t = now_ns();
                rtt[k] = t - prev;
                prev = t;
            }
        });
        Counters client = minus(peer.counters(), mine);
        double p50 = percentile(rtt, 50), p99 = percentile(rtt, 99);
        printf("lat %lu %.4f %.4f %ld\n", static_cast<unsigned long>(size), p50, p99, n);
        printf("ctr %lu %ld %lu %lu %lu %lu %lu %lu\n", static_cast<unsigned long>(size), n,
               static_cast<unsigned long>(client.doorbells),
               static_cast<unsigned long>(client.spin_wins),
               static_cast<unsigned long>(client.sleeps),
               static_cast<unsigned long>(server.doorbells),
               static_cast<unsigned long>(server.spin_wins),
               static_cast<unsigned long>(server.sleeps));
        fflush(stdout);
    }
}

// Blocks of kBlock round trips, one transport then the other, until each has
// o.iters or the time cap (twice max_ms for the two) is reached.
void latency_paired(const Options &o, Peer *const *peers, int ctl) {
    constexpr long kBlock = 50;
    for (uint64_t size : o.sizes) {
        long warm = std::max(1L, o.warmup);
        double per = 0;
        for (uint32_t w = 0; w < 2; ++w) {
            uint64_t t0 = now_ns();
            phase(
                ctl, kPong, size, warm,
                [&] {
                    for (long k = 0; k < warm; ++k) peers[w]->ping(size);
                },
                w);
            per = std::max(per, static_cast<double>(now_ns() - t0) / warm);
        }
        long n = o.iters;
        if (per * n > o.max_ms * 1e6) n = std::max(20L, static_cast<long>(o.max_ms * 1e6 / per));
        std::vector<uint64_t> rtt[2];
        while (static_cast<long>(rtt[1].size()) < n) {
            for (uint32_t w = 0; w < 2; ++w) {
                long b = std::min(kBlock, n - static_cast<long>(rtt[w].size()));
                phase(
                    ctl, kPong, size, b,
                    [&] {
                        uint64_t prev = now_ns();
                        for (long k = 0; k < b; ++k) {
                            peers[w]->ping(size);
                            uint64_t t = now_ns();
                            rtt[w].push_back(t - prev);
                            prev = t;
                        }
                    },
                    w);
            }
        }
        for (uint32_t w = 0; w < 2; ++w) {
            long got = static_cast<long>(rtt[w].size());
            double p50 = percentile(rtt[w], 50), p99 = percentile(rtt[w], 99);
            printf("pair %u %lu %.4f %.4f %ld\n", w, static_cast<unsigned long>(size), p50, p99,
                   got);
        }
        fflush(stdout);
    }
}

void bandwidth(const Options &o, Peer &peer, int ctl) {
    for (uint64_t size : o.sizes) {
        uint64_t unit = std::max<uint64_t>(size, 1);
        long warm = static_cast<long>(std::max<uint64_t>(2, o.bw_bytes / 16 / unit));
        uint64_t t0 = now_ns();
        phase(ctl, kStream, size, warm, [&] { peer.stream_out(size, warm); });
        double per = static_cast<double>(now_ns() - t0) / warm;
        long n = static_cast<long>(std::max<uint64_t>(2, o.bw_bytes / unit));
        if (per * n > o.max_ms * 1e6) n = std::max(2L, static_cast<long>(o.max_ms * 1e6 / per));
        uint64_t start = 0, end = 0;
        phase(ctl, kStream, size, n, [&] {
            start = now_ns();
            peer.stream_out(size, n);
            end = now_ns();
        });
        double mbps = static_cast<double>(size) * n / static_cast<double>(end - start) * 1e3;
        printf("bw %lu %.1f %ld\n", static_cast<unsigned long>(size), mbps, n);
        fflush(stdout);
    }
}

} // namespace

uint64_t Options::max_size() const {
    uint64_t m = 0;
    for (uint64_t s : sizes) m = std::max(m, s);
    return m;
}

uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

void pin_cpu(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        fail("pin to CPU %d: %s", cpu, strerror(errno));
}

void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench[%d]: ", static_cast<int>(getpid()));
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stdout);
    _exit(1);
}

void write_all(int fd, const void *p, size_t n, const char *what) {
    auto *b = static_cast<const uint8_t *>(p);
    while (n) {
        ssize_t r = write(fd, b, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) fail("%s write: %s", what, strerror(errno));
        b += r;
        n -= static_cast<size_t>(r);
    }
}

void read_all(int fd, void *p, size_t n, const char *what) {
    auto *b = static_cast<uint8_t *>(p);
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) fail("%s read: %s", what, strerror(errno));
        if (r == 0) fail("%s closed: the other process is gone", what);
        b += r;
        n -= static_cast<size_t>(r);
    }
}

void ctl_write(int fd, const void *p, size_t n) {
    write_all(fd, p, n, "control channel");
}

void ctl_read(int fd, void *p, size_t n) {
    read_all(fd, p, n, "control channel");
}

void enter_netns(const std::string &name) {
    if (name.empty()) return;
    std::string path = "/var/run/netns/" + name;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0)
        fail("enter network namespace %s: %s", name.c_str(), strerror(errno));
    close(fd);
}

void relax(bool same_cpu) {
    if (same_cpu)
        sched_yield();
    else
        __builtin_ia32_pause();
}

Options parse_options(int argc, char **argv) {
    Options o;
    static const option longopts[] = {{"mode", required_argument, nullptr, 'm'},
                                      {"variant", required_argument, nullptr, 'v'},
                                      {"sizes", required_argument, nullptr, 's'},
                                      {"cpus", required_argument, nullptr, 'c'},
                                      {"iters", required_argument, nullptr, 'n'},
                                      {"warmup", required_argument, nullptr, 'w'},
                                      {"max-ms", required_argument, nullptr, 'T'},
                                      {"bytes", required_argument, nullptr, 'b'},
                                      {"window", required_argument, nullptr, 'W'},
                                      {"timeout", required_argument, nullptr, 't'},
                                      {"netns", required_argument, nullptr, 'N'},
                                      {"server-host", required_argument, nullptr, 'H'},
                                      {"devices", required_argument, nullptr, 'D'},
                                      {nullptr, 0, nullptr, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, nullptr)) != -1) {
        switch (c) {
        case 'm':
            o.mode = optarg;
            break;
        case 'v':
            o.variant = optarg;
            break;
        case 's':
            o.sizes = parse_list(optarg);
            break;
        case 'c': {
            auto cpus = parse_list(optarg);
            if (cpus.size() != 2) fail("--cpus wants CLIENT,SERVER");
            o.client_cpu = static_cast<int>(cpus[0]);
            o.server_cpu = static_cast<int>(cpus[1]);
            break;
        }
        case 'n':
            o.iters = std::max(1L, atol(optarg));
            break;
        case 'w':
            o.warmup = std::max(1L, atol(optarg));
            break;
        case 'T':
            o.max_ms = atof(optarg);
            break;
        case 'b':
            o.bw_bytes = parse_size(optarg);
            break;
        case 'W':
            o.window = std::max(1, atoi(optarg));
            break;
        case 't':
            o.timeout_s = std::max(1, atoi(optarg));
            break;
        case 'N':
        case 'D': {
            std::string v = optarg;
            size_t comma = v.find(',');
            if (comma == std::string::npos)
                fail("--%s wants CLIENT,SERVER", c == 'N' ? "netns" : "devices");
            (c == 'N' ? o.client_netns : o.client_device) = v.substr(0, comma);
            (c == 'N' ? o.server_netns : o.server_device) = v.substr(comma + 1);
            break;
        }
        case 'H':
            o.server_host = optarg;
            break;
        default:
            fprintf(stderr,
                    "usage: %s [--mode lat|bw] [--variant V] [--sizes 0,64,4K,...] "
                    "[--cpus CLIENT,SERVER] [--iters N] [--warmup N] [--max-ms MS] "
                    "[--bytes N] [--window W] [--timeout S] [--netns CLIENT,SERVER] "
                    "[--server-host ADDRESS] [--devices CLIENT,SERVER]\n",
                    argv[0]);
            exit(2);
        }
    }
    if (o.mode != "lat" && o.mode != "bw") fail("--mode must be lat or bw");
    if (o.sizes.empty())
        o.sizes = o.mode == "lat" ? std::vector<uint64_t>{0, 1, 8, 64, 256, 512, 1024, 4096}
                                  : std::vector<uint64_t>{4096, 65536, 1 << 20, 8 << 20};
    return o;
}

// Runs the client (this process) and the server (a child) over the given
// transports: one (run) or two (run_paired).
static int run_with(const Options &o, Transport *const *ts, int nts) {
    // A peer that died must show as a write error with a message, not kill us.
    signal(SIGPIPE, SIG_IGN);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        fail("socketpair: %s", strerror(errno));
    for (int i = 0; i < nts; ++i) ts[i]->prepare(o);
    fflush(stdout);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) fail("fork: %s", strerror(errno));
    if (pid == 0) {
        // A client that dies must not leave a server spinning on a CPU.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        alarm(static_cast<unsigned>(o.timeout_s));
        close(sv[0]);
        enter_netns(o.server_netns);
        pin_cpu(o.server_cpu);
        {
            std::unique_ptr<Peer> peers[2];
            Peer *raw[2] = {};
            for (int i = 0; i < nts; ++i) raw[i] = (peers[i] = ts[i]->open(o, true, sv[1])).get();
            serve(raw, nts, sv[1]);
        }
        uint8_t bye = 0;
        ctl_write(sv[1], &bye, 1);
        fflush(stdout);
        _exit(0);
    }
    alarm(static_cast<unsigned>(o.timeout_s));
    close(sv[1]);
    enter_netns(o.client_netns);
    pin_cpu(o.client_cpu);
    {
        std::unique_ptr<Peer> peers[2];
        Peer *raw[2] = {};
        for (int i = 0; i < nts; ++i) raw[i] = (peers[i] = ts[i]->open(o, false, sv[0])).get();
        if (nts == 2)
            latency_paired(o, raw, sv[0]);
        else if (o.mode == "lat")
            latency(o, *raw[0], sv[0]);
        else
            bandwidth(o, *raw[0], sv[0]);
        Cmd quit{kQuit, 0, 0, 0};
        ctl_write(sv[0], &quit, sizeof quit);
        for (int i = 0; i < nts; ++i) raw[i]->close();
        // The server closes first, so its teardown is not reported as an error there.
        uint8_t bye;
        ctl_read(sv[0], &bye, 1);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench: server process ended badly (status %d)\n", status);
        return 1;
    }
    return 0;
}

int run(const Options &o, Transport &t) {
    Transport *ts[1] = {&t};
    return run_with(o, ts, 1);
}

int run_paired(const Options &o, Transport &a, Transport &b) {
    if (o.mode != "lat") fail("two transports side by side: latency only");
    Transport *ts[2] = {&a, &b};
    return run_with(o, ts, 2);
}

} // namespace bench
