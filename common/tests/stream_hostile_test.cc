// A hostile client on shm: it connects like any other, then writes garbage into the
// connection memory it shares with the server (its ring and its control block).  The
// server's stream must end with an error at once, and its other streams go on.
#include "helpers.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

using namespace std::chrono_literals;
using vipl::deadline_in;

namespace {

// The shm connection memory as the client finds it in its own mapping (libvipl's
// src/prov/shm/shm.h, restated here as a hostile client would know it): a header
// (magic, version, ring size, header size), the acceptor's control block at 64 and
// the requester's at 256 (three lines each, the consumed counter 64 bytes in), then ring 0
// (acceptor to requester) and ring 1 (requester to acceptor).  A record is 64-byte
// aligned: sequence word (position / 64 + 1, written last), type (2: a send), flags,
// length, immediate data, then the payload.
constexpr uint32_t kMagic = 0x4D485356;
constexpr size_t kEnd0 = 64, kEnd1 = 256, kConsumed = 64;
constexpr uint16_t kRecSend = 2;

struct Conn {
    uint8_t *base = nullptr;
    uint32_t ring = 0, header = 0;
    std::atomic<uint64_t> *consumed_by_server() const {
        return reinterpret_cast<std::atomic<uint64_t> *>(base + kEnd0 + kConsumed);
    }
    std::atomic<uint64_t> *my_consumed() const {
        return reinterpret_cast<std::atomic<uint64_t> *>(base + kEnd1 + kConsumed);
    }
    uint8_t *out() const { return base + header + ring; }
    // A record at pos of the client's ring: payload, header, then the sequence word.
    void record(uint64_t pos, uint16_t type, uint32_t len, const void *payload, size_t n) const {
        uint8_t *r = out() + (pos & (ring - 1));
        memcpy(r + 16, payload, n);
        memcpy(r + 4, &type, 2);
        uint16_t flags = 0;
        memcpy(r + 6, &flags, 2);
        memcpy(r + 8, &len, 4);
        memset(r + 12, 0, 4);
        reinterpret_cast<std::atomic<uint32_t> *>(r)->store(static_cast<uint32_t>(pos / 64 + 1),
                                                            std::memory_order_release);
    }
};

// The connection memory mapped in this process (a client with one connection).
bool find_conn(Conn *c) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        if (line.find("memfd:vipl-conn") == std::string::npos) continue;
        c->base =
            reinterpret_cast<uint8_t *>(std::stoull(line.substr(0, line.find('-')), nullptr, 16));
        uint32_t magic;
        memcpy(&magic, c->base, 4);
        memcpy(&c->ring, c->base + 8, 4);
        memcpy(&c->header, c->base + 12, 4);
        return magic == kMagic;
    }
    return false;
}

enum class Scribble { huge_length, wrapping_record, lying_consumed, credits_ffff };

const char *name(Scribble s) {
    switch (s) {
    case Scribble::huge_length:
        return "a record of 0xfffffff0 bytes";
    case Scribble::wrapping_record:
        return "a record running past the end of the ring";
    case Scribble::lying_consumed:
        return "a consumed counter past what the server wrote";
    default:
        return "credits of 0xffff on every message";
    }
}

// The hostile client: waits until the server took what its stream sent (its first
// credits), scribbles, then stays (its end of the socket open: a hang-up would end
// the connection anyway) until the parent says so.
int hostile(Scribble what, int go_fd) {
    Conn c;
    if (!find_conn(&c)) return 10;
    uint64_t pos = 0;
    for (int i = 0; i < 400; ++i) { // until the server's consumed counter settles
        uint64_t now = c.consumed_by_server()->load();
        if (now && now == pos) break;
        pos = now;
        usleep(5000);
    }
    if (!pos) return 11;
    switch (what) {
    case Scribble::huge_length:
        c.record(pos, kRecSend, 0xfffffff0u, "x", 1);
        break;
    case Scribble::wrapping_record: {
        uint64_t off = pos & (c.ring - 1);
        c.record(pos, kRecSend, static_cast<uint32_t>(c.ring - off + 64), "x", 1);
        break;
    }
    case Scribble::lying_consumed:
        c.my_consumed()->store(uint64_t(1) << 40);
        break;
    case Scribble::credits_ffff:
        for (int i = 0; i < 3; ++i, pos += 64) {
            // A data frame: kind 1, flags 0, credits 0xffff, length 4, then 4 bytes.
            uint8_t frame[12] = {1, 0, 0xff, 0xff, 0, 0, 0, 4, 'a', 'b', 'c', 'd'};
            c.record(pos, kRecSend, sizeof frame, frame, sizeof frame);
        }
        break;
    }
    pollfd p{go_fd, POLLIN, 0};
    poll(&p, 1, 20000);
    return 0;
}

// The honest client echoes every 64 bytes back until the end of the stream.
int echo(vipl::Stream &s) {
    std::byte buf[64];
    for (;;) {
        if (!vt::read_exact(s, buf, sizeof buf, 20s)) return 0;
        if (!vt::write_all(s, buf, sizeof buf)) return 3;
    }
}

void exchange(vipl::Stream &s, uint32_t seed) {
    std::byte out[64], in[64];
    vt::fill(out, sizeof out, 0, seed);
    REQUIRE(vt::write_all(s, out, sizeof out));
    REQUIRE(vt::read_exact(s, in, sizeof in, 10s));
    REQUIRE(memcmp(in, out, sizeof in) == 0);
}

} // namespace

TEST_CASE("stream: a client scribbling the memory it shares with the server ends that stream "
          "with an error at once, and the server's other streams go on (shm)") {
    auto what = GENERATE(Scribble::huge_length, Scribble::wrapping_record, Scribble::lying_consumed,
                         Scribble::credits_ffff);
    bool shareable = GENERATE(false, true);
    INFO(name(what) << (shareable ? ", shareable server streams" : ", private server streams"));
    vipl::StreamOptions o;
    o.shareable = shareable;
    auto l = vt::bind_free("vipl+shm://127.0.0.1", o);

    int honest = vt::spawn_client(l.uri(), {}, echo);
    auto hs = vt::accept_one(l);
    exchange(hs, 1);

    int go[2];
    REQUIRE(pipe2(go, O_CLOEXEC) == 0);
    int bad = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &) {
        close(go[1]);
        return hostile(what, go[0]);
    });
    close(go[0]);
    auto vs = vt::accept_one(l);

    // Read (and, for the counter, write) until the stream fails; an honest peer
    // that stays would leave it open for ever.
    std::error_code ec;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::byte> buf(1 << 16);
    vs.set_nonblocking(true);
    while (!ec && std::chrono::steady_clock::now() - t0 < 5s) {
        std::error_code rec;
        vs.read(buf, rec);
        if (rec && rec != std::errc::operation_would_block) ec = rec;
        if (!ec && what == Scribble::lying_consumed) {
            std::error_code wec;
            vs.write(buf, wec);
            if (wec && wec != std::errc::operation_would_block) ec = wec;
        }
        std::this_thread::sleep_for(1ms);
    }
    auto took = std::chrono::steady_clock::now() - t0;
    INFO("the stream ended with: " << ec.message());
    REQUIRE(ec);
    if (what == Scribble::credits_ffff)
        CHECK(ec == std::errc::protocol_error);
    else
        CHECK((ec == std::errc::connection_reset || ec == std::errc::protocol_error ||
               ec == std::errc::broken_pipe));
    CHECK(took < 2s);

    // The hostile client was still there: nothing but its writes ended the stream.
    CHECK(write(go[1], "x", 1) == 1);
    close(go[1]);
    CHECK(vt::wait_child(bad) == 0);

    exchange(hs, 2);
    vs.abort();
    hs.close(deadline_in(5s));
    CHECK(vt::wait_child(honest) == 0);
}
