// The floor: one ring per direction in a mapping both processes inherit,
// both sides polling.  A record is valid when its sequence word, written
// last, matches its position, so a small message costs one cache line moving
// between the cores.  The consumer publishes how far it has read; the
// producer looks at that only when the ring seems full.  Data is copied in
// and out (two copies).  On a shared CPU the waiter yields between polls.
#include "harness.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <vector>

namespace {

using namespace bench;

constexpr uint64_t kLine = 64;
constexpr uint64_t kRing = 512 * 1024;
constexpr uint64_t kMask = kRing - 1;
constexpr uint32_t kChunk = 32 * 1024;
constexpr uint32_t kPad = UINT32_MAX;

struct Rec {
    std::atomic<uint32_t> seq;
    uint32_t len;
};

struct alignas(kLine) Ctl {
    std::atomic<uint64_t> consumed;
};

// Ring 0 carries client to server, ring 1 server to client.
struct Shared {
    Ctl ctl[2];
    alignas(kLine) uint8_t ring[2][kRing];
};

uint32_t seq_of(uint64_t pos) {
    return static_cast<uint32_t>(pos / kLine) + 1;
}
uint64_t round_line(uint64_t n) {
    return (n + kLine - 1) & ~(kLine - 1);
}

class Tx {
public:
    Tx(uint8_t *ring, Ctl *ctl, bool same_cpu) : ring_(ring), ctl_(ctl), same_(same_cpu) {}
    void send(const uint8_t *p, uint64_t size) {
        uint64_t off = 0;
        do {
            uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(size - off, kChunk));
            put(p + off, chunk);
            off += chunk;
        } while (off < size);
    }

private:
    Rec *at(uint64_t pos) { return reinterpret_cast<Rec *>(ring_ + (pos & kMask)); }
    void put(const uint8_t *p, uint32_t len) {
        uint64_t bytes = round_line(sizeof(Rec) + len);
        uint64_t off = produced_ & kMask;
        uint64_t pad = off + bytes > kRing ? kRing - off : 0;
        while (produced_ + pad + bytes - consumed_ > kRing) {
            consumed_ = ctl_->consumed.load(std::memory_order_acquire);
            if (produced_ + pad + bytes - consumed_ > kRing) relax(same_);
        }
        if (pad) {
            Rec *r = at(produced_);
            r->len = kPad;
            r->seq.store(seq_of(produced_), std::memory_order_release);
            produced_ += pad;
        }
        Rec *r = at(produced_);
        r->len = len;
        memcpy(reinterpret_cast<uint8_t *>(r + 1), p, len);
        r->seq.store(seq_of(produced_), std::memory_order_release);
        produced_ += bytes;
    }

    uint8_t *ring_;
    Ctl *ctl_;
    bool same_;
    uint64_t produced_ = 0;
    uint64_t consumed_ = 0; // last value seen of the consumer's position
};

class Rx {
public:
    Rx(uint8_t *ring, Ctl *ctl, bool same_cpu) : ring_(ring), ctl_(ctl), same_(same_cpu) {}
    void recv(uint8_t *dst, uint64_t size) {
        uint64_t got = 0;
        do {
            got += get(dst + got);
        } while (got < size);
    }

private:
    uint32_t get(uint8_t *dst) {
        for (;;) {
            auto *r = reinterpret_cast<Rec *>(ring_ + (consumed_ & kMask));
            while (r->seq.load(std::memory_order_acquire) != seq_of(consumed_)) relax(same_);
            uint32_t len = r->len;
            if (len == kPad) {
                consumed_ += kRing - (consumed_ & kMask);
                continue;
            }
            memcpy(dst, r + 1, len);
            consumed_ += round_line(sizeof(Rec) + len);
            ctl_->consumed.store(consumed_, std::memory_order_release);
            return len;
        }
    }

    uint8_t *ring_;
    Ctl *ctl_;
    bool same_;
    uint64_t consumed_ = 0;
};

class RingPeer : public Peer {
public:
    RingPeer(Shared *s, bool server, const Options &o)
        : tx_(s->ring[server ? 1 : 0], &s->ctl[server ? 1 : 0], o.same_cpu()),
          rx_(s->ring[server ? 0 : 1], &s->ctl[server ? 0 : 1], o.same_cpu()),
          buf_(std::max<uint64_t>(o.max_size(), 1)) {}
    void ping(uint64_t size) override {
        tx_.send(buf_.data(), size);
        rx_.recv(buf_.data(), size);
    }
    void pong(uint64_t size) override {
        rx_.recv(buf_.data(), size);
        tx_.send(buf_.data(), size);
    }
    void stream_out(uint64_t size, long n) override {
        for (long k = 0; k < n; ++k) tx_.send(buf_.data(), size);
        rx_.recv(buf_.data(), 0);
    }
    void stream_in(uint64_t size, long n) override {
        for (long k = 0; k < n; ++k) rx_.recv(buf_.data(), size);
        tx_.send(buf_.data(), 0);
    }

private:
    Tx tx_;
    Rx rx_;
    std::vector<uint8_t> buf_;
};

class RingTransport : public Transport {
public:
    void prepare(const Options &) override {
        void *p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (p == MAP_FAILED) fail("mmap: %s", strerror(errno));
        shared_ = static_cast<Shared *>(p);
    }
    std::unique_ptr<Peer> open(const Options &o, bool server, int) override {
        return std::make_unique<RingPeer>(shared_, server, o);
    }

private:
    Shared *shared_ = nullptr;
};

} // namespace

int main(int argc, char **argv) {
    Options o = parse_options(argc, argv);
    RingTransport t;
    return run(o, t);
}
