#include "prov/tcp/tcp_wire.h"

#include <bit>
#include <cstring>

namespace vipl::tcp {
namespace {

// Big-endian on the wire whatever the host's order.
template <class T>
T to_wire(T v) {
    if constexpr (std::endian::native == std::endian::little) {
        if constexpr (sizeof(T) == 2) return __builtin_bswap16(v);
        if constexpr (sizeof(T) == 4) return __builtin_bswap32(v);
        if constexpr (sizeof(T) == 8) return __builtin_bswap64(v);
    }
    return v;
}
template <class T>
void put(uint8_t *p, T v) {
    v = to_wire(v);
    memcpy(p, &v, sizeof v);
}
template <class T>
T get(const uint8_t *p) {
    T v;
    memcpy(&v, p, sizeof v);
    return to_wire(v);
}
void put16(uint8_t *p, uint16_t v) {
    put(p, v);
}
void put32(uint8_t *p, uint32_t v) {
    put(p, v);
}
void put64(uint8_t *p, uint64_t v) {
    put(p, v);
}
uint16_t get16(const uint8_t *p) {
    return get<uint16_t>(p);
}
uint32_t get32(const uint8_t *p) {
    return get<uint32_t>(p);
}
uint64_t get64(const uint8_t *p) {
    return get<uint64_t>(p);
}

} // namespace

void encode_frame(const Frame &f, uint8_t *out) {
    out[0] = f.type;
    out[1] = f.flags;
    put16(out + 2, 0);
    put32(out + 4, f.length);
    put32(out + 8, f.imm);
    put32(out + 12, f.handle);
    put64(out + 16, f.addr);
}

Decode decode_frame(const uint8_t *in, uint64_t max_payload, Frame *out) {
    Frame f;
    f.type = in[0];
    f.flags = in[1];
    f.length = get32(in + 4);
    f.imm = get32(in + 8);
    f.handle = get32(in + 12);
    f.addr = get64(in + 16);
    if (f.type == 0 || f.type >= kFrameTypeEnd) return Decode::bad_type;
    if (f.flags & ~(kImm | kAckReq)) return Decode::bad_flags;
    if ((f.flags & kAckReq) && f.type != kSend) return Decode::bad_flags;
    if (get16(in + 2) != 0) return Decode::bad_reserved;
    if (f.length > max_payload) return Decode::too_long;
    if (!(f.flags & kImm) && f.imm && (f.type == kSend || f.type == kRdmaWrite))
        return Decode::bad_fields;
    switch (f.type) {
    case kSend:
        if (f.handle || f.addr) return Decode::bad_fields;
        break;
    case kRdmaWrite:
        // The range must not wrap: the target checks it against its regions.
        if (f.addr + f.length < f.addr) return Decode::bad_fields;
        break;
    case kRdmaReadReq:
        if (f.length || f.flags || f.imm > max_payload || f.addr + f.imm < f.addr)
            return Decode::bad_fields;
        break;
    case kRdmaReadResp:
        if (f.flags || f.addr || f.imm) return Decode::bad_fields;
        if (f.handle && (f.handle != kReadRefused || f.length)) return Decode::bad_fields;
        break;
    case kAck:
        if (f.length || f.flags || f.imm || f.handle) return Decode::bad_fields;
        break;
    case kError:
        if (f.length || f.flags || f.handle) return Decode::bad_fields;
        break;
    case kCredit:
        if (f.length || f.flags || f.imm || f.handle) return Decode::bad_fields;
        break;
    }
    *out = f;
    return Decode::ok;
}

const char *decode_error_text(Decode d) {
    switch (d) {
    case Decode::ok:
        return "ok";
    case Decode::bad_type:
        return "unknown frame type";
    case Decode::bad_flags:
        return "unknown frame flags";
    case Decode::bad_reserved:
        return "reserved field not zero";
    case Decode::too_long:
        return "frame longer than the connection allows";
    case Decode::bad_fields:
        return "inconsistent frame fields";
    }
    return "?";
}

void encode_hello(const Hello &h, uint8_t *out) {
    memset(out, 0, kHelloWire);
    uint8_t *p = out;
    put32(p, kWireMagic);
    put16(p + 4, kWireVersion);
    put32(p + 6, h.type);
    put32(p + 10, h.reliability);
    put64(p + 14, h.mtu);
    put32(p + 22, h.rdma);
    put32(p + 26, h.reason);
    put16(p + 30, h.host_len);
    put16(p + 32, h.disc_len);
    put16(p + 34, h.want_len);
    memcpy(p + 36, h.host, kMaxHostAddress);
    memcpy(p + 36 + kMaxHostAddress, h.disc, kMaxDisc);
    memcpy(p + 36 + kMaxHostAddress + kMaxDisc, h.want, kMaxDisc);
    put32(p + 36 + kMaxHostAddress + 2 * kMaxDisc, h.window);
}

bool decode_hello(const uint8_t *in, Hello *out) {
    if (get32(in) != kWireMagic || get16(in + 4) != kWireVersion) return false;
    Hello h{};
    h.type = get32(in + 6);
    h.reliability = get32(in + 10);
    h.mtu = get64(in + 14);
    h.rdma = get32(in + 22);
    h.reason = get32(in + 26);
    h.host_len = get16(in + 30);
    h.disc_len = get16(in + 32);
    h.want_len = get16(in + 34);
    if (h.type < kHelloRequest || h.type > kHelloAck || h.host_len > kMaxHostAddress ||
        h.disc_len > kMaxDisc || h.want_len > kMaxDisc || h.rdma > 3)
        return false;
    memcpy(h.host, in + 36, kMaxHostAddress);
    memcpy(h.disc, in + 36 + kMaxHostAddress, kMaxDisc);
    memcpy(h.want, in + 36 + kMaxHostAddress + kMaxDisc, kMaxDisc);
    h.window = get32(in + 36 + kMaxHostAddress + 2 * kMaxDisc);
    if ((h.type == kHelloRequest || h.type == kHelloPeerRequest || h.type == kHelloAccept) &&
        h.window < kMinWindow)
        return false;
    *out = h;
    return true;
}

} // namespace vipl::tcp
