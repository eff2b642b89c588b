// Writes the seed corpus of fuzz_ring (ring_input.h): well-formed traffic of each
// kind the victim takes, and the classic attacks of a hostile peer.
//   vipl-shm-fuzz-seeds DIR   (writes DIR/fuzz_ring/*)
#include "ring_input.h"

#include <cstdio>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace {

using namespace vt;

struct Input {
    std::vector<uint8_t> b;
    explicit Input(uint8_t cfg) { b.push_back(cfg); }
    Input &put(uint64_t v, int bytes) {
        for (int i = 0; i < bytes; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
        return *this;
    }
    Input &op(Op o) { return put(o, 1); }
    Input &send(uint16_t len, uint8_t flags = 0, uint32_t imm = 0) {
        return op(kOpSend).put(len, 2).put(flags, 1).put(imm, 4);
    }
    Input &raw(uint8_t type, uint16_t flags, uint32_t len, uint32_t imm, uint8_t words) {
        op(kOpRaw).put(type, 1).put(flags, 2).put(len, 4).put(imm, 4).put(words, 1);
        for (int i = 0; i < words * 4; ++i) put(i, 1);
        return *this;
    }
    Input &frag(uint8_t kind, uint8_t flags, uint32_t offset, uint32_t total, Target t,
                uint32_t raddr, uint16_t chunk, uint32_t imm = 0) {
        return op(kOpFrag)
            .put(kind, 1)
            .put(flags, 1)
            .put(offset, 4)
            .put(total, 4)
            .put(t, 1)
            .put(raddr, 4)
            .put(chunk, 2)
            .put(imm, 4);
    }
    Input &read_req(Target t, uint32_t raddr, uint32_t total, uint64_t req) {
        return op(kOpReadReq).put(t, 1).put(raddr, 4).put(total, 4).put(req, 8);
    }
    Input &read_resp(uint64_t req, uint32_t offset, uint32_t total, uint32_t status, uint16_t chunk,
                     uint8_t flags) {
        return op(kOpReadResp)
            .put(req, 8)
            .put(offset, 4)
            .put(total, 4)
            .put(status, 4)
            .put(chunk, 2)
            .put(flags, 1);
    }
    Input &progress(uint8_t n = 4) { return op(kOpProgress).put(n, 1); }
    Input &consumed(ConsumedMode m, uint64_t v = 0) { return op(kOpConsumed).put(m, 1).put(v, 8); }
    Input &post(uint8_t what, uint16_t len) { return op(kOpPost).put(what, 1).put(len, 2); }
    Input &frame(uint8_t kind, uint8_t flags, uint16_t credits, uint32_t length, uint16_t data) {
        return op(kOpFrame).put(kind, 1).put(flags, 1).put(credits, 2).put(length, 4).put(data, 2);
    }
};

constexpr uint8_t kDelivery4 = 1 | (4 << kCfgRecvShift);
constexpr uint8_t kRdma = kCfgShareable; // VI mode: RDMA enabled

void write(const std::string &dir, const char *name, const Input &in) {
    std::string path = dir + "/" + name;
    FILE *f = fopen(path.c_str(), "wb");
    if (!f || fwrite(in.b.data(), 1, in.b.size(), f) != in.b.size() || fclose(f) != 0) {
        perror(path.c_str());
        exit(1);
    }
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    std::string dir = std::string(argv[1]) + "/fuzz_ring";
    mkdir(argv[1], 0755);
    mkdir(dir.c_str(), 0755);
    // A bare VI (kDelivery4: reliable delivery, four receives posted).
    write(dir, "vi_sends", Input(kDelivery4).send(100).send(250, 1, 7).progress().op(kOpHonest));
    write(dir, "vi_unreliable_drop",
          Input(0 | (1 << kCfgRecvShift)).send(10).send(400).send(20).progress());
    write(dir, "vi_fragments",
          Input(kDelivery4)
              .frag(0, 2, 0, 300, kTargetWindow, 0, 200)
              .frag(0, 4, 200, 300, kTargetWindow, 0, 100)
              .progress());
    write(dir, "vi_fragments_out_of_order",
          Input(kDelivery4)
              .frag(0, 2, 0, 300, kTargetWindow, 0, 100)
              .frag(0, 4, 200, 300, kTargetWindow, 0, 100)
              .progress());
    write(dir, "vi_fragment_total_grows",
          Input(kDelivery4)
              .frag(0, 2, 0, 100, kTargetWindow, 0, 50)
              .frag(0, 4, 50, 4000, kTargetWindow, 0, 50)
              .progress());
    write(dir, "vi_huge_length", Input(kDelivery4).raw(2, 0, 0xfffffff0u, 0, 4).progress());
    write(dir, "vi_unknown_type", Input(kDelivery4).raw(77, 0, 8, 0, 2).progress());
    write(
        dir, "vi_rdma_write",
        Input(kDelivery4 | kRdma).frag(1, 2 | 4 | 1, 0, 64, kTargetWindow, 128, 64, 99).progress());
    write(dir, "vi_rdma_write_canary",
          Input(kDelivery4 | kRdma).frag(1, 6, 0, 64, kTargetCanary, 0, 64).progress());
    write(dir, "vi_rdma_write_wild",
          Input(kDelivery4 | kRdma).frag(1, 6, 0, 64, kTargetRaw, 0x41414141, 64).progress());
    write(dir, "vi_rdma_read",
          Input(kDelivery4 | kRdma)
              .read_req(kTargetReadOnly, 64, 3000, 0)
              .progress()
              .consumed(kConsumedHonest)
              .progress()
              .consumed(kConsumedHonest)
              .progress());
    write(dir, "vi_rdma_read_canary",
          Input(kDelivery4 | kRdma).read_req(kTargetCanary, 0, 256, 0).progress());
    write(dir, "vi_rdma_read_past_region",
          Input(kDelivery4 | kRdma).read_req(kTargetReadOnly, 4000, 512, 0).progress());
    write(dir, "vi_send_get",
          Input(kDelivery4)
              .op(kOpSendGet)
              .put(1, 2)
              .put(1, 4)
              .put(64, 4)
              .put(0x10000, 8)
              .put(64, 8)
              .progress());
    write(dir, "vi_read_answer_unasked",
          Input(kDelivery4 | kRdma).read_resp(0, 0, 64, 0, 64, 4).progress());
    write(
        dir, "vi_own_read_answered",
        Input(kDelivery4 | kRdma).post(2, 63).progress().read_resp(0, 0, 64, 0, 64, 4).progress());
    write(dir, "vi_error_code", Input(kDelivery4).op(kOpError).put(0x7fffffff, 4).progress());
    write(dir, "vi_consumed_ahead",
          Input(kDelivery4).consumed(kConsumedAhead, 1 << 20).post(0, 2000).progress());
    write(dir, "vi_consumed_back",
          Input(kDelivery4).post(0, 700).consumed(kConsumedBack, 64).post(0, 900).progress());
    write(dir, "vi_broken_reason",
          Input(kDelivery4).op(kOpState).put(3, 4).put(0x7fffffff, 4).put(~0ull, 8).progress());
    write(
        dir, "vi_header_ring_size",
        Input(kDelivery4).op(kOpHeader).put(kHdrRingSize, 1).put(1u << 30, 4).send(64).progress());
    write(dir, "vi_waiter_churn",
          Input(kDelivery4).op(kOpWaiter).put(~0ull, 8).put(0x7fffffff, 4).send(8).progress());
    write(dir, "vi_pad_and_wrap", Input(kDelivery4).send(1000).op(kOpPad).send(1000).progress());
    write(dir, "vi_rewound_honest",
          Input(kDelivery4).send(1000).op(kOpRewound).put(0, 1).put(0, 8).send(1000).progress());
    write(dir, "vi_rewound_raw",
          Input(kDelivery4).send(1000).op(kOpRewound).put(1, 1).put(1024, 8).send(64).progress());
    write(dir, "vi_rewound_over_record",
          Input(kDelivery4).send(64).op(kOpRewound).put(1, 1).put(64, 8).send(64).progress());
    write(dir, "vi_next_lap_seq",
          Input(kDelivery4).op(kOpSeq).put(kSeqNextLap, 1).put(0, 4).progress());
    write(dir, "vi_poke_published",
          Input(kDelivery4).send(200).op(kOpPoke).put(8, 4).put(0xffffffff, 4).progress());
    write(dir, "vi_race_length", Input(kDelivery4).op(kOpRace).put(kRaceLen, 1).put(2000, 2));
    write(dir, "vi_race_type", Input(kDelivery4).op(kOpRace).put(kRaceType, 1).put(2000, 2));
    write(dir, "vi_race_nseg", Input(kDelivery4).op(kOpRace).put(kRaceNseg, 1).put(2000, 2));
    // A common Stream (private, then shareable): frames inside sends.
    write(dir, "stream_data",
          Input(kCfgStream).frame(2, 0, 4, 0, 0).frame(1, 0, 0, 100, 100).progress());
    write(dir, "stream_shareable_data",
          Input(kCfgStream | kCfgShareable).frame(2, 1, 4, 0, 0).frame(1, 1, 0, 50, 50).progress());
    write(dir, "stream_credits_ffff", Input(kCfgStream).frame(2, 0, 0xffff, 0, 0).progress());
    write(dir, "stream_length_lies", Input(kCfgStream).frame(1, 0, 0, 4000, 10).progress());
    write(dir, "stream_rts_huge", Input(kCfgStream).frame(5, 0, 0, 16, 16).progress());
    write(dir, "stream_fin_then_data",
          Input(kCfgStream).frame(3, 0, 0, 0, 0).frame(1, 0, 0, 10, 10).progress());
    write(dir, "stream_writer_consumed_ahead",
          Input(kCfgStream)
              .frame(2, 0, 4, 0, 0)
              .consumed(kConsumedAhead, 4096)
              .post(0, 8000)
              .progress());
    write(dir, "stream_huge_record", Input(kCfgStream).raw(2, 0, 0x7fffffff, 0, 4).progress());
    return 0;
}
