// Writes the seed corpus of the tcp fuzz targets:
//   gen_corpus DIR   ->  DIR/fuzz_frame/*, DIR/fuzz_stream/*
// The checked-in corpus (corpus/ beside this file) is its output, plus the
// inputs that once found a bug (named crash-*); a test checks that the two
// agree.  Seeds are valid streams and the classic ways of breaking them;
// the fuzzer mutates from there.
#include "fuzz_layout.h"
#include "prov/tcp/tcp_wire.h"

#include <vipl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace {

using namespace vipl::tcp;
using namespace vt;
using Bytes = std::vector<uint8_t>;

constexpr uint8_t kUnreliable = 0, kDelivery = 1, kReception = 2;

uint8_t cfg(uint8_t level, int recvs, bool own_ops = false, bool large_mtu = false,
            bool imm = false) {
    return static_cast<uint8_t>(level | recvs << kCfgRecvShift | (own_ops ? kCfgOwnOps : 0) |
                                (large_mtu ? kCfgLargeMtu : 0) | (imm ? kCfgImm : 0));
}

// A fuzz_stream input: the configuration bytes, then frames.
class Stream {
public:
    explicit Stream(uint8_t config, uint8_t config2 = 0) : b_{config, config2} {}
    Stream &frame(uint8_t type, uint8_t flags, uint32_t length, uint32_t imm, uint32_t handle,
                  uint64_t addr) {
        size_t at = b_.size();
        b_.resize(at + kFrameHeader);
        encode_frame(Frame{type, flags, length, imm, handle, addr}, b_.data() + at);
        if (type == kSend || type == kRdmaWrite || type == kRdmaReadResp)
            for (uint32_t i = 0; i < length; ++i) b_.push_back(static_cast<uint8_t>(i * 7 + 1));
        return *this;
    }
    Stream &send(uint32_t len, uint8_t flags = 0, uint32_t imm = 0) {
        return frame(kSend, flags, len, imm, 0, 0);
    }
    Stream &write(uint64_t addr, uint32_t len, uint32_t handle = page_handle(kWindowPage),
                  uint8_t flags = 0, uint32_t imm = 0) {
        return frame(kRdmaWrite, flags, len, imm, handle, addr);
    }
    Stream &read(uint64_t addr, uint32_t len, uint32_t handle = page_handle(kWindowPage)) {
        return frame(kRdmaReadReq, 0, 0, len, handle, addr);
    }
    Stream &ack(uint64_t upto) { return frame(kAck, 0, 0, 0, 0, upto); }
    Stream &error(uint64_t seq, uint32_t code) { return frame(kError, 0, 0, code, 0, seq); }
    Stream &credit(uint64_t taken) { return frame(kCredit, 0, 0, 0, 0, taken); }
    // Harmless frames, more than the VI takes in one call: what it owes for
    // the frames before goes out before it reads those after.
    Stream &pause() {
        for (int i = 0; i < 300; ++i) ack(0);
        return *this;
    }
    Stream &answer(uint32_t len, uint32_t status = 0) {
        return frame(kRdmaReadResp, 0, len, 0, status, 0);
    }
    // A header written by hand (fields decode_frame refuses).
    Stream &raw(std::initializer_list<uint8_t> bytes) {
        b_.insert(b_.end(), bytes);
        return *this;
    }
    Stream &cut(size_t drop) {
        b_.resize(b_.size() - drop);
        return *this;
    }
    const Bytes &bytes() const { return b_; }

private:
    Bytes b_;
};

struct Seed {
    const char *name;
    Bytes bytes;
};

const uint64_t W = page_addr(kWindowPage), R = page_addr(kReadOnlyPage);

std::vector<Seed> stream_seeds() {
    const uint32_t D = kDelivery, Rc = kReception, U = kUnreliable;
    return {
        // Sends.
        {"send_plain", Stream(cfg(D, 2)).send(100).send(7).bytes()},
        {"send_immediate", Stream(cfg(D, 1)).send(40, kImm, 0x1234).bytes()},
        {"send_empty", Stream(cfg(D, 1)).send(0).bytes()},
        {"send_fills_three_segments", Stream(cfg(D, 2)).send(50).send(288).bytes()},
        {"send_ack_requested", Stream(cfg(Rc, 2)).send(64, kAckReq).send(64, kAckReq).bytes()},
        {"send_longer_than_receive", Stream(cfg(D, 1)).send(400).bytes()},
        {"send_no_receive", Stream(cfg(D, 0)).send(10).bytes()},
        {"send_unreliable_dropped", Stream(cfg(U, 1)).send(500).send(10).send(10).bytes()},
        // RDMA writes, in and out of bounds.
        {"write_in_window", Stream(cfg(D, 0)).write(W + 100, 64).bytes()},
        {"write_whole_window", Stream(cfg(D, 0, false, true)).write(W, 4096).bytes()},
        {"write_immediate",
         Stream(cfg(D, 1)).write(W, 32, page_handle(kWindowPage), kImm, 7).bytes()},
        {"write_immediate_no_receive",
         Stream(cfg(D, 0)).write(W, 32, page_handle(kWindowPage), kImm, 7).bytes()},
        {"write_past_window_end", Stream(cfg(D, 0)).write(W + 4090, 16).bytes()},
        {"write_below_window", Stream(cfg(D, 0)).write(W - 8, 16).bytes()},
        {"write_canary_handle",
         Stream(cfg(D, 0)).write(page_addr(kCanaryHiPage), 16, page_handle(kCanaryHiPage)).bytes()},
        {"write_read_only_region",
         Stream(cfg(D, 0)).write(R, 16, page_handle(kReadOnlyPage)).bytes()},
        {"write_forged_handle",
         Stream(cfg(D, 0)).write(W, 16, page_handle(kWindowPage) + (1u << 20)).bytes()},
        {"write_unregistered",
         Stream(cfg(D, 0)).write(page_addr(kUnregisteredPage), 16, kUnregisteredPage).bytes()},
        {"write_refused_unreliable",
         Stream(cfg(U, 1)).write(W + 4000, 200).send(10).write(W, 8).bytes()},
        // RDMA reads.
        {"read_window", Stream(cfg(Rc, 0)).write(W + 256, 16).read(W + 256, 128).bytes()},
        {"read_whole_read_only",
         Stream(cfg(D, 0, false, true)).read(R, 4096, page_handle(kReadOnlyPage)).bytes()},
        {"read_empty", Stream(cfg(D, 0)).read(W + 4096, 0).read(W, 0, 9).bytes()},
        {"read_outside", Stream(cfg(D, 0)).read(W - 16, 32).bytes()},
        {"read_unreliable", Stream(cfg(U, 0)).read(W, 16).send(4).bytes()},
        // Answers to the VI's own send, RDMA write and RDMA read.
        {"ack_and_answer", Stream(cfg(Rc, 0, true)).ack(1).ack(2).answer(kOwnLength).bytes()},
        {"ack_beyond_sent", Stream(cfg(D, 0, true)).ack(5).bytes()},
        {"ack_nothing_sent", Stream(cfg(D, 0)).ack(1).bytes()},
        {"ack_backwards", Stream(cfg(Rc, 0, true)).ack(2).ack(1).bytes()},
        {"answer_refused", Stream(cfg(D, 0, true)).answer(0, kReadRefused).ack(1).bytes()},
        {"answer_wrong_length", Stream(cfg(D, 0, true)).answer(kOwnLength / 2).bytes()},
        {"answer_unasked", Stream(cfg(D, 0)).answer(8).bytes()},
        {"error_one_descriptor", Stream(cfg(Rc, 0, true)).error(0, kNoError).ack(2).bytes()},
        {"error_fatal", Stream(cfg(D, 0, true)).error(kNoSequence, VIP_ERROR_CONN_LOST).bytes()},
        {"error_unknown_code", Stream(cfg(D, 0)).error(kNoSequence, 99).bytes()},
        // Flow control: credit for what the VI wrote, and for more.
        {"credit", Stream(cfg(D, 0, true)).credit(kFrameHeader).credit(2 * kFrameHeader).bytes()},
        {"credit_beyond_sent", Stream(cfg(D, 0)).credit(1).bytes()},
        {"answer_waits_for_credit", Stream(cfg(D, 0, false, true), kCfgSmallWindow)
                                        .read(R, 4096, page_handle(kReadOnlyPage))
                                        .pause()
                                        .credit(2048)
                                        .credit(kMinWindow)
                                        .bytes()},
        // Malformed headers.
        {"bad_type",
         Stream(cfg(D, 1))
             .send(8)
             .raw({9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
             .bytes()},
        {"bad_flags", Stream(cfg(D, 1)).send(8, 0x80).bytes()},
        {"ack_request_on_write",
         Stream(cfg(D, 0)).write(W, 8, page_handle(kWindowPage), kAckReq).bytes()},
        {"reserved_not_zero", Stream(cfg(D, 1))
                                  .raw({kSend, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0,
                                        0,     0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4})
                                  .bytes()},
        {"too_long", Stream(cfg(D, 1)).send(static_cast<uint32_t>(kMtuSmall) + 1).bytes()},
        {"write_wraps",
         Stream(cfg(D, 0))
             .raw({kRdmaWrite, 0,    0, 0, 0,    0,    0,    16,   0,    0,    0,    0,
                   0,          0x10, 0, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf8})
             .bytes()},
        {"truncated_header", Stream(cfg(D, 1)).send(8).cut(8 + 14).bytes()},
        {"truncated_payload", Stream(cfg(D, 1)).send(100).cut(60).bytes()},
        // Everything in one conversation.
        {"session", Stream(cfg(Rc, 5, true, false, true))
                        .send(64, kAckReq)
                        .write(W + 512, 128)
                        .ack(1)
                        .read(W + 512, 64)
                        .send(20, kImm | kAckReq, 42)
                        .write(W, 16, page_handle(kWindowPage), kImm, 43)
                        .ack(2)
                        .answer(kOwnLength)
                        .read(R + 100, 200, page_handle(kReadOnlyPage))
                        .send(280, kAckReq)
                        .error(kNoSequence, kNoError)
                        .send(0)
                        .bytes()},
    };
}

// A fuzz_frame input: the bound on lengths, then the bytes.
Bytes frames(uint32_t max, std::initializer_list<Frame> list) {
    Bytes b = {static_cast<uint8_t>(max >> 24), static_cast<uint8_t>(max >> 16),
               static_cast<uint8_t>(max >> 8), static_cast<uint8_t>(max)};
    for (const Frame &f : list) {
        size_t at = b.size();
        b.resize(at + kFrameHeader);
        encode_frame(f, b.data() + at);
        if (f.type == kSend || f.type == kRdmaWrite || f.type == kRdmaReadResp)
            b.resize(b.size() + f.length, 0xab);
    }
    return b;
}

Bytes hello(uint32_t type) {
    Hello h{};
    h.type = type;
    h.reliability = VIP_SERVICE_RELIABLE_DELIVERY;
    h.mtu = 65536;
    h.rdma = 3;
    h.reason = type == kHelloReject ? VIP_REJECT : 0;
    h.host_len = 4;
    h.host[0] = 127;
    h.host[3] = 1;
    h.disc_len = 2;
    h.disc[0] = 0x4e;
    h.disc[1] = 0x21;
    h.want_len = 3;
    memcpy(h.want, "abc", 3);
    h.window = 65536;
    Bytes b = {0, 0, 0x10, 0};
    b.resize(4 + kHelloWire);
    encode_hello(h, b.data() + 4);
    return b;
}

std::vector<Seed> frame_seeds() {
    const uint32_t max = 4096;
    return {
        {"send", frames(max, {{kSend, kImm | kAckReq, 16, 5, 0, 0}})},
        {"rdma_write", frames(max, {{kRdmaWrite, kImm, 32, 9, 0x100003, W}})},
        {"rdma_read_request", frames(max, {{kRdmaReadReq, 0, 0, 4096, 0x100005, R}})},
        {"rdma_read_answer", frames(max, {{kRdmaReadResp, 0, 8, 0, 0, 0}})},
        {"rdma_read_refused", frames(max, {{kRdmaReadResp, 0, 0, 0, kReadRefused, 0}})},
        {"ack", frames(max, {{kAck, 0, 0, 0, 0, 12}})},
        {"error", frames(max, {{kError, 0, 0, VIP_ERROR_RDMAW_PROT, 0, 3}})},
        {"credit", frames(max, {{kCredit, 0, 0, 0, 0, 1u << 20}})},
        {"stream", frames(max, {{kSend, 0, 4, 0, 0, 0},
                                {kRdmaWrite, 0, 0, 0, 1, ~0ull},
                                {kAck, 0, 0, 0, 0, 1},
                                {kRdmaReadReq, 0, 0, 16, 2, ~0ull - 16},
                                {kError, 0, 0, kNoError, 0, kNoSequence}})},
        {"length_at_bound", frames(max, {{kSend, 0, max, 0, 0, 0}})},
        {"length_past_bound", frames(max, {{kSend, 0, max + 1, 0, 0, 0}})},
        {"write_wraps", frames(max, {{kRdmaWrite, 0, 16, 0, 1, ~0ull - 8}})},
        {"hello_request", hello(kHelloRequest)},
        {"hello_peer_request", hello(kHelloPeerRequest)},
        {"hello_accept", hello(kHelloAccept)},
        {"hello_reject", hello(kHelloReject)},
        {"hello_ack", hello(kHelloAck)},
    };
}

bool write_all(const std::string &dir, const std::vector<Seed> &seeds) {
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        perror(dir.c_str());
        return false;
    }
    for (const Seed &s : seeds) {
        std::string path = dir + "/" + s.name;
        FILE *f = fopen(path.c_str(), "wb");
        if (!f || fwrite(s.bytes.data(), 1, s.bytes.size(), f) != s.bytes.size() || fclose(f)) {
            perror(path.c_str());
            return false;
        }
    }
    return true;
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR   (writes DIR/fuzz_frame/ and DIR/fuzz_stream/)\n", argv[0]);
        return 2;
    }
    std::string dir = argv[1];
    bool ok = (mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) &&
              write_all(dir + "/fuzz_frame", frame_seeds()) &&
              write_all(dir + "/fuzz_stream", stream_seeds());
    return ok ? 0 : 1;
}
