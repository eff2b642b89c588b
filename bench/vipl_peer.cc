// One process's end of a libvipl benchmark connection (shm by default,
// --devices for another provider).  The spin budget comes from the
// environment (VIPL_SPIN_US), set by the runner: large for "peer awake", 0
// for blocking.
//
// Every VI message needs a receive posted in advance, so the client never
// sends more than the server has posted: it starts a phase with the server's
// 2*window receives as credits, and the server returns `window` credits in a
// 0-byte message (immediate data kCredit) after every `window` receives.
#include "vipl_peer.h"
#include "vipl_conn.h"

#include <memory>
#include <string>
#include <unistd.h>

namespace bench {
namespace {

constexpr uint32_t kCredit = 3;
constexpr uint32_t kAck = 2;

class ViplPeer : public Peer {
public:
    ViplPeer(const Options &o, bool server)
        : window_(o.window), conn_(o.window, 2 * o.window, o.max_size(),
                                   server ? o.server_device : o.client_device, o.server_host) {
        for (int i = 0; i < 2 * window_; ++i) conn_.post_recv(i);
        // The client's pid names the connection, so concurrent runs do not meet.
        std::string disc = "vb" + std::to_string(server ? getppid() : getpid());
        if (server)
            conn_.accept(disc);
        else
            conn_.connect(disc);
    }
    // Reposting the last reply's receive and taking the last completed send
    // happen after the next send is posted, while the peer works: only
    // posting and waiting stay on the round trip.  Two send descriptors
    // alternate so a queued one is never rewritten.
    void ping(uint64_t size) override {
        conn_.post_send(next_send_, static_cast<uint32_t>(size));
        next_send_ ^= 1;
        settle(); // the previous message is complete: its echo came back
        ++unreaped_;
        repost_ = conn_.recv_index(conn_.wait_recv());
    }
    void pong(uint64_t) override {
        VIP_DESCRIPTOR *d = conn_.wait_recv();
        conn_.post_send(next_send_, d->CS.Length);
        next_send_ ^= 1;
        conn_.post_recv(conn_.recv_index(d));
        settle(); // the previous echo is complete: the client has sent again
        ++unreaped_;
    }
    void stream_out(uint64_t size, long n) override {
        settle();
        long credits = 2L * window_;
        int inflight = 0;
        for (long k = 0; k < n; ++k) {
            while (credits == 0) {
                VIP_DESCRIPTOR *d = conn_.wait_recv();
                if (ViplConn::imm_of(d) != kCredit) fail("vipl: expected a credit message");
                conn_.post_recv(conn_.recv_index(d));
                credits += window_;
            }
            if (inflight == window_) {
                conn_.wait_send();
                --inflight;
            }
            conn_.post_send(static_cast<int>(k % window_), static_cast<uint32_t>(size));
            --credits;
            ++inflight;
        }
        while (inflight-- > 0) conn_.wait_send();
        for (;;) { // credits may still come before the acknowledgement
            VIP_DESCRIPTOR *d = conn_.wait_recv();
            uint32_t imm = ViplConn::imm_of(d);
            conn_.post_recv(conn_.recv_index(d));
            if (imm == kAck) break;
        }
    }
    void stream_in(uint64_t, long n) override {
        settle();
        for (long i = 1; i <= n; ++i) {
            VIP_DESCRIPTOR *d = conn_.wait_recv();
            conn_.post_recv(conn_.recv_index(d));
            if (i % window_ == 0 && i < n) {
                conn_.post_send(0, 0, kCredit);
                conn_.wait_send(); // a copy send: complete once in the ring
            }
        }
        conn_.post_send(0, 0, kAck);
        conn_.wait_send();
    }
    void finish() override { settle(); }
    Counters counters() override {
        VIP_VI_COUNTERS c = conn_.counters();
        return {c.DoorbellsRung, c.SpinWins, c.Sleeps};
    }

private:
    void settle() {
        if (repost_ >= 0) conn_.post_recv(repost_);
        repost_ = -1;
        for (; unreaped_ > 0; --unreaped_) conn_.wait_send();
    }

    int window_;
    ViplConn conn_;
    int next_send_ = 0;
    int unreaped_ = 0;
    int repost_ = -1; // receive taken by the last ping, not yet posted again
};

class ViplTransport : public Transport {
public:
    std::unique_ptr<Peer> open(const Options &o, bool server, int) override {
        return std::make_unique<ViplPeer>(o, server);
    }
};

} // namespace

std::unique_ptr<Transport> vipl_transport() {
    return std::make_unique<ViplTransport>();
}

} // namespace bench
