// Two-process benchmark harness shared by the transports measured here.
//
// The program forks: the parent is the client, which drives every phase and
// prints the results; the child is the server.  Each pins itself to its CPU.
// A socketpair carries the phase commands and the server's counters, always
// outside the timed path, so every transport is timed by the same loop.
//
// Output, one line per measurement (parsed by bench/run.py):
//   lat SIZE P50_ONE_WAY_US P99_ONE_WAY_US ITERATIONS
//   ctr SIZE ITERATIONS CLIENT_DOORBELLS CLIENT_SPINWINS CLIENT_SLEEPS
//       SERVER_DOORBELLS SERVER_SPINWINS SERVER_SLEEPS        (one line)
//   bw  SIZE MB_PER_S MESSAGES
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bench {

struct Options {
    std::string mode = "lat"; // lat | bw
    std::string variant;      // transport specific (e.g. unix | tcp)
    std::vector<uint64_t> sizes;
    int client_cpu = 0;
    int server_cpu = 1;
    long iters = 5000;   // timed round trips per size, at most
    long warmup = 200;   // untimed round trips per size
    double max_ms = 300; // time cap of one size's timed phase
    uint64_t bw_bytes = 256ull << 20;
    // Messages in flight (transports that need a window): as many as UCX's shared-memory
    // FIFO holds (64 segments), whose sender needs no receive posted by its peer.  With
    // 16, 4 KiB messages went at 0.7x UCX's rate, the sender waiting for credits.
    int window = 64;
    int timeout_s = 120;
    // Across hosts: each process enters its network namespace (by name, as
    // `ip netns` makes them) right after the fork; the server listens on
    // server_host, libvipl NICs are client_device / server_device.
    std::string client_netns, server_netns;
    std::string server_host;
    std::string client_device = "shm0", server_device = "shm0";

    bool same_cpu() const { return client_cpu == server_cpu; }
    uint64_t max_size() const;
};

struct Counters {
    uint64_t doorbells = 0, spin_wins = 0, sleeps = 0;
};

// One process's end of an established connection.
class Peer {
public:
    virtual ~Peer() = default;
    // Client: one round trip of `size` bytes each way.  Server: its echo.
    virtual void ping(uint64_t size) = 0;
    virtual void pong(uint64_t size) = 0;
    // Client: n messages of `size` bytes, then wait for the server's
    // acknowledgement that all arrived.  Server: the other side of that.
    virtual void stream_out(uint64_t size, long n) = 0;
    virtual void stream_in(uint64_t size, long n) = 0;
    // Server, after a phase's last echo: sees it out before the server stops calling
    // into the transport (libvipl's copy path pushes what did not fit the ring only
    // in later calls, as a libfabric provider with manual progress does).
    virtual void finish() {}
    // Client, once the server was told to quit: the orderly close, made while the server
    // makes its own (a stream's close waits for the peer's acknowledgement, which only a
    // call on the peer's side gives: no hidden thread).
    virtual void close() {}
    virtual Counters counters() { return {}; }
};

class Transport {
public:
    virtual ~Transport() = default;
    // In the parent before fork: state both processes inherit.
    virtual void prepare(const Options &) {}
    // In each process after fork and pinning.  `ctl` may carry setup data
    // (addresses) between the two; it must be left with nothing unread.
    virtual std::unique_ptr<Peer> open(const Options &o, bool server, int ctl) = 0;
};

Options parse_options(int argc, char **argv);
// Runs the benchmark described by o; returns the exit status.
int run(const Options &o, Transport &t);
// Latency of two transports in one pair of processes, in alternating blocks
// of round trips, so that both meet the same moments of a shared host.
// Prints, per size and transport I (0: a, 1: b):
//   pair I SIZE P50_ONE_WAY_US P99_ONE_WAY_US ITERATIONS
int run_paired(const Options &o, Transport &a, Transport &b);

uint64_t now_ns();
void pin_cpu(int cpu);
// Moves this process into the network namespace `name` (nothing if empty).
void enter_netns(const std::string &name);
[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// All n bytes, or the benchmark fails naming `what`.
void write_all(int fd, const void *p, size_t n, const char *what);
void read_all(int fd, void *p, size_t n, const char *what);
// The same on the control channel between client and server.
void ctl_write(int fd, const void *p, size_t n);
void ctl_read(int fd, void *p, size_t n);

// Polling wait step: a pause between two CPUs; on a shared CPU a spinning
// waiter would hold it until the next tick, so it yields instead.
void relax(bool same_cpu);

} // namespace bench
