// Where a stream message's time goes: the CPU cost of each call of a message's way
// through common/'s Stream beside the libvipl calls that carry it, over shm.
//
// Both ends live in one thread of one process, so nothing crosses a core: the figures
// are instructions and this CPU's caches, the software a message goes through.  A
// round trip across cores adds the transfer of the lines each call touches on the
// peer's side; comparing the two (report.py) tells how much of the stream's extra
// round trip is its own instructions and how much the lines it moves.
//
// One exchange, each call timed on its own (the cost of a pair of clock reads taken
// off; medians over the exchanges):
//   raw     a posts (VipPostSend), b takes it (VipRecvDone) and gives the buffer back
//           (VipPostRecv), a reaps the send (VipSendDone); then b to a the same way
//   stream  a.write(), b.read(); then b.write(), a.read()
//   look    a look that finds nothing, as a spinning waiter makes between two
//           messages: VipRecvDone (raw) and Stream::events() (stream)
//
// Output:  cost LAYER CALL SIZE NS_MEDIAN NS_P10 SAMPLES
// Usage:   bench-stream-cost [--cpu N] [--sizes 8,1024] [--iters N]
#include "harness.h"
#include "vipl_conn.h"

#include "vipl/stream.h"
#include "vipl/stream_config.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <getopt.h>
#include <poll.h>
#include <string>
#include <thread>
#include <vector>

namespace bench {
namespace {

struct Params {
    int cpu = 0;
    std::vector<uint32_t> sizes{8, 1024};
    int iters = 20000;
    int warmup = 2000;
};

// Durations of one call, in ns, the clock pair's own cost taken off.
class Samples {
public:
    void add(uint64_t ns) { v_.push_back(ns); }
    void print(const char *layer, const char *call, uint32_t size, double clock_ns) {
        std::sort(v_.begin(), v_.end());
        auto at = [&](double q) {
            double x = static_cast<double>(v_[static_cast<size_t>(q * (v_.size() - 1))]);
            return std::max(0.0, x - clock_ns);
        };
        printf("cost %s %s %u %.1f %.1f %zu\n", layer, call, size, at(0.5), at(0.1), v_.size());
        v_.clear();
    }

private:
    std::vector<uint64_t> v_;
};

// The median cost of two back-to-back clock reads.
double clock_pair_ns() {
    std::vector<uint64_t> v(20000);
    for (auto &x : v) {
        uint64_t t0 = now_ns();
        x = now_ns() - t0;
    }
    std::sort(v.begin(), v.end());
    return static_cast<double>(v[v.size() / 2]);
}

template <class F>
void timed(Samples &s, bool keep, F &&f) {
    uint64_t t0 = now_ns();
    f();
    uint64_t t1 = now_ns();
    if (keep) s.add(t1 - t0);
}

void raw(const Params &p, double clock_ns) {
    uint32_t max = *std::max_element(p.sizes.begin(), p.sizes.end());
    ViplConn a(4, 4, max), b(4, 4, max);
    a.post_recv(0);
    b.post_recv(0);
    std::thread t([&] { b.accept("cost"); });
    a.connect("cost");
    t.join();
    for (uint32_t size : p.sizes) {
        Samples post, done, repost, reap, look;
        for (int i = 0; i < p.warmup + p.iters; ++i) {
            bool keep = i >= p.warmup;
            for (int dir = 0; dir < 2; ++dir) {
                ViplConn &from = dir ? b : a, &to = dir ? a : b;
                VIP_DESCRIPTOR *d = nullptr;
                VIP_RETURN rc = VIP_NOT_DONE;
                timed(post, keep, [&] { from.post_send(0, size); });
                timed(done, keep, [&] { rc = VipRecvDone(to.vi(), &d); });
                if (rc != VIP_SUCCESS)
                    fail("VipRecvDone: %s (the message must be there)", VipReturnString(rc));
                timed(repost, keep, [&] { to.post_recv(0); });
                timed(reap, keep, [&] { rc = VipSendDone(from.vi(), &d); });
                if (rc != VIP_SUCCESS) fail("VipSendDone: %s", VipReturnString(rc));
                timed(look, keep, [&] { rc = VipRecvDone(to.vi(), &d); });
                if (rc != VIP_NOT_DONE) fail("VipRecvDone found a message nobody sent");
            }
        }
        post.print("raw", "post-send", size, clock_ns);
        done.print("raw", "recv-done", size, clock_ns);
        repost.print("raw", "post-recv", size, clock_ns);
        reap.print("raw", "send-done", size, clock_ns);
        look.print("raw", "look", size, clock_ns);
    }
}

void stream(const Params &p, double clock_ns) {
    std::error_code ec;
    std::string why;
    vipl::StreamOptions opt = vipl::stream_options_from_env(ec, &why);
    if (ec) fail("VIPL_STREAM_*: %s", why.c_str());
    vipl::Listener l = vipl::Listener::bind("vipl+shm://127.0.0.1:0", ec, opt);
    if (ec) fail("listen: %s", ec.message().c_str());
    vipl::Stream b;
    std::error_code aec;
    std::thread t([&] { b = l.accept(vipl::deadline_in(std::chrono::seconds(20)), aec); });
    vipl::Stream a = vipl::Stream::connect("vipl+shm://127.0.0.1:" + std::to_string(l.uri().port),
                                           vipl::deadline_in(std::chrono::seconds(20)), ec, opt);
    t.join();
    if (ec || aec) fail("connect: %s", (ec ? ec : aec).message().c_str());
    uint32_t max = *std::max_element(p.sizes.begin(), p.sizes.end());
    std::vector<std::byte> out(max), in(max);
    const vipl::Deadline soon = vipl::deadline_in(std::chrono::seconds(30));
    for (uint32_t size : p.sizes) {
        Samples write, read, look;
        for (int i = 0; i < p.warmup + p.iters; ++i) {
            bool keep = i >= p.warmup;
            for (int dir = 0; dir < 2; ++dir) {
                vipl::Stream &from = dir ? b : a, &to = dir ? a : b;
                size_t n = 0;
                timed(write, keep, [&] { n = from.write(std::span(out.data(), size), ec); });
                if (ec || n != size) fail("write: %zu of %u: %s", n, size, ec.message().c_str());
                // A deadline, not kNever: one thread cannot wait for itself.
                timed(read, keep, [&] { n = to.read(std::span(in.data(), size), soon, ec); });
                if (ec || n != size) fail("read: %zu of %u: %s", n, size, ec.message().c_str());
                short ev = 0;
                timed(look, keep, [&] { ev = to.events(); });
                if (ev & POLLIN) fail("events(): data nobody sent");
            }
        }
        write.print("stream", "write", size, clock_ns);
        read.print("stream", "read", size, clock_ns);
        look.print("stream", "look", size, clock_ns);
    }
    a.close(vipl::deadline_in(std::chrono::seconds(5)));
    b.close(vipl::deadline_in(std::chrono::seconds(5)));
}

Params parse(int argc, char **argv) {
    Params p;
    static const option opts[] = {{"cpu", required_argument, nullptr, 'c'},
                                  {"sizes", required_argument, nullptr, 's'},
                                  {"iters", required_argument, nullptr, 'i'},
                                  {nullptr, 0, nullptr, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, nullptr)) != -1;) {
        if (c == 'c') {
            p.cpu = atoi(optarg);
        } else if (c == 's') {
            p.sizes.clear();
            for (char *s = optarg; *s;) {
                char *end;
                unsigned long v = strtoul(s, &end, 10);
                if (end == s || v == 0 || v > (1u << 20)) fail("--sizes: 1 .. 1048576 bytes");
                p.sizes.push_back(static_cast<uint32_t>(v));
                s = *end == ',' ? end + 1 : end;
                if (*end && *end != ',') fail("--sizes: a comma-separated list");
            }
        } else if (c == 'i') {
            p.iters = std::max(1, atoi(optarg));
        } else {
            fail("usage: %s [--cpu N] [--sizes 8,1024] [--iters N]", argv[0]);
        }
    }
    if (p.sizes.empty()) fail("--sizes: at least one size");
    return p;
}

} // namespace
} // namespace bench

int main(int argc, char **argv) {
    bench::Params p = bench::parse(argc, argv);
    bench::pin_cpu(p.cpu);
    double clock_ns = bench::clock_pair_ns();
    printf("cost clock pair 0 %.1f %.1f 20000\n", clock_ns, clock_ns);
    bench::raw(p, clock_ns);
    bench::stream(p, clock_ns);
    return 0;
}
