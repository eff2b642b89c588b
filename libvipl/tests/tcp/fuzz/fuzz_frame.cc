// libFuzzer target: the tcp provider's decoders (decode_frame, decode_hello)
// on arbitrary bytes.  Input: the connection's MaxTransferSize (4 bytes,
// big-endian), then the bytes to decode.
//
// The rules of tcp_wire.h are written out again here, field by field, from
// the raw bytes: a header or Hello decodes if and only if it keeps them.  A
// decoded record encodes back to the very same bytes, and a refused one
// leaves the output untouched.  The bytes are also walked as a stream of
// frames, the way the receiver does.
#include "prov/tcp/tcp_wire.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using namespace vipl::tcp;

void check(bool ok, const char *what) {
    if (ok) return;
    fprintf(stderr, "fuzz_frame: invariant broken: %s\n", what);
    abort();
}

uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = v << 8 | p[i];
    return v;
}

bool no_wrap(uint64_t addr, uint64_t len) {
    return addr <= ~0ull - len;
}

// Whether a header keeps the documented rules.
bool frame_rules(const uint8_t *b, uint64_t max) {
    uint8_t type = b[0], flags = b[1];
    uint64_t reserved = be(b + 2, 2), length = be(b + 4, 4), imm = be(b + 8, 4),
             handle = be(b + 12, 4), addr = be(b + 16, 8);
    bool has_imm = flags & kImm, ack_req = flags & kAckReq;
    if (type < kSend || type > kCredit || (flags & ~(kImm | kAckReq)) || reserved || length > max)
        return false;
    switch (type) {
    case kSend:
        return handle == 0 && addr == 0 && (has_imm || imm == 0);
    case kRdmaWrite:
        return !ack_req && (has_imm || imm == 0) && no_wrap(addr, length);
    case kRdmaReadReq:
        return flags == 0 && length == 0 && imm <= max && no_wrap(addr, imm);
    case kRdmaReadResp:
        return flags == 0 && addr == 0 && imm == 0 &&
               (handle == 0 || (handle == kReadRefused && length == 0));
    case kAck:
    case kCredit:
        return flags == 0 && length == 0 && imm == 0 && handle == 0;
    default: // kError
        return flags == 0 && length == 0 && handle == 0;
    }
}

bool hello_rules(const uint8_t *b) {
    uint64_t type = be(b + 6, 4);
    // Who asks or accepts says how much of the stream it can hold.
    bool offers_window = type == kHelloRequest || type == kHelloPeerRequest || type == kHelloAccept;
    return be(b, 4) == kWireMagic && be(b + 4, 2) == kWireVersion && type >= kHelloRequest &&
           type <= kHelloAck && be(b + 22, 4) <= 3 && be(b + 30, 2) <= kMaxHostAddress &&
           be(b + 32, 2) <= kMaxDisc && be(b + 34, 2) <= kMaxDisc &&
           (!offers_window || be(b + 36 + kMaxHostAddress + 2 * kMaxDisc, 4) >= kMinWindow);
}

// Decodes one header; returns its payload length if it decoded.
bool one_frame(const uint8_t *b, uint64_t max, uint64_t *payload) {
    Frame f, untouched;
    memset(&f, 0xa5, sizeof f);
    memcpy(&untouched, &f, sizeof f);
    Decode d = decode_frame(b, max, &f);
    const char *text = decode_error_text(d);
    check(text && strcmp(text, "?") != 0, "every outcome has a text");
    check((d == Decode::ok) == frame_rules(b, max), "decode_frame agrees with the rules");
    if (d != Decode::ok) {
        check(memcmp(&f, &untouched, sizeof f) == 0, "a refused header leaves the frame alone");
        return false;
    }
    uint8_t again[kFrameHeader];
    encode_frame(f, again);
    check(memcmp(again, b, kFrameHeader) == 0, "a decoded header encodes to the same bytes");
    check(f.length <= max, "length within the bound");
    *payload = f.length;
    return true;
}

void one_hello(const uint8_t *b) {
    Hello h, untouched;
    memset(&h, 0x5a, sizeof h);
    memcpy(&untouched, &h, sizeof h);
    bool ok = decode_hello(b, &h);
    check(ok == hello_rules(b), "decode_hello agrees with the rules");
    if (!ok) {
        check(memcmp(&h, &untouched, sizeof h) == 0, "a refused Hello leaves the record alone");
        return;
    }
    uint8_t again[kHelloWire];
    encode_hello(h, again);
    check(memcmp(again, b, kHelloWire) == 0, "a decoded Hello encodes to the same bytes");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    uint64_t max = be(data, 4);
    const uint8_t *p = data + 4;
    size_t n = size - 4;
    if (n >= kHelloWire) one_hello(p);
    // As the receiver reads them: header, payload, header...
    size_t off = 0;
    while (n - off >= kFrameHeader) {
        uint64_t payload;
        if (!one_frame(p + off, max, &payload)) break;
        if (n - off - kFrameHeader < payload) break;
        off += kFrameHeader + payload;
    }
    return 0;
}
