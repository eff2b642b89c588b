#include "hello.h"

#include <cstring>

namespace vipl::db {

namespace {

constexpr uint8_t kHelloMagic[kMagicSize] = {'V', 'I', 'P', 'L', 'H', 'E', 'L', 'O'};
constexpr uint8_t kReplyMagic[kMagicSize] = {'V', 'I', 'P', 'L', 'R', 'P', 'L', 'Y'};

void put16(uint8_t *p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
}

void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

uint16_t get16(const uint8_t *p) {
    return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

uint32_t get32(const uint8_t *p) {
    return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

bool zero(const uint8_t *p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        if (p[i]) return false;
    return true;
}

// The common part of both parsers: magic, then completeness, version, length and check.
Parse frame(std::span<const uint8_t> in, const uint8_t *magic, std::size_t size) {
    std::size_t k = in.size() < kMagicSize ? in.size() : kMagicSize;
    if (std::memcmp(in.data(), magic, k) != 0) return Parse::not_ours;
    if (in.size() < size) return Parse::need_more;
    const uint8_t *p = in.data();
    if (get16(p + 8) != kVersion || get16(p + 10) != size) return Parse::bad;
    if (get32(p + size - 4) != fnv1a(p, size - 4)) return Parse::bad;
    return Parse::ok;
}

// The common part of both encoders, the layout frame() checks: zeroes with the magic,
// version and length first (open_frame), the check last once the body is in (seal_frame).
void open_frame(uint8_t *out, const uint8_t *magic, std::size_t size) {
    std::memset(out, 0, size);
    std::memcpy(out, magic, kMagicSize);
    put16(out + 8, kVersion);
    put16(out + 10, static_cast<uint16_t>(size));
}

void seal_frame(uint8_t *out, std::size_t size) {
    put32(out + size - 4, fnv1a(out, size - 4));
}

bool valid_provider(uint8_t v) {
    return v == static_cast<uint8_t>(Provider::shm) || v == static_cast<uint8_t>(Provider::tcp);
}

} // namespace

uint32_t fnv1a(const void *data, std::size_t n, uint32_t h) noexcept {
    const auto *p = static_cast<const uint8_t *>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
    return h;
}

void encode_hello(const Hello &h, uint8_t out[kHelloSize]) noexcept {
    open_frame(out, kHelloMagic, kHelloSize);
    out[12] = static_cast<uint8_t>(h.provider);
    std::memcpy(out + 16, h.token, 16);
    std::memcpy(out + 32, h.secret, 16);
    put32(out + 48, h.buffer_size);
    put32(out + 52, h.cpu);
    put32(out + 56, h.host);
    put32(out + 60, h.group);
    seal_frame(out, kHelloSize);
}

void encode_reply(const Reply &r, uint8_t out[kReplySize]) noexcept {
    open_frame(out, kReplyMagic, kReplySize);
    out[12] = static_cast<uint8_t>(r.status);
    out[13] = static_cast<uint8_t>(r.provider);
    put32(out + 16, r.buffer_size);
    seal_frame(out, kReplySize);
}

void encode_prologue(const uint8_t secret[16], uint64_t pre_bytes,
                     uint8_t out[kPrologueSize]) noexcept {
    std::memcpy(out, secret, 16);
    for (int i = 0; i < 8; ++i) out[16 + i] = static_cast<uint8_t>(pre_bytes >> (56 - 8 * i));
}

bool decode_prologue(const uint8_t in[kPrologueSize], const uint8_t secret[16],
                     uint64_t *pre_bytes) noexcept {
    uint8_t diff = 0;
    for (int i = 0; i < 16; ++i) diff |= static_cast<uint8_t>(in[i] ^ secret[i]);
    if (diff) return false;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | in[16 + i];
    *pre_bytes = v;
    return true;
}

Parse parse_hello(std::span<const uint8_t> in, Hello *out) noexcept {
    Parse p = frame(in, kHelloMagic, kHelloSize);
    if (p != Parse::ok) return p;
    const uint8_t *b = in.data();
    if (!valid_provider(b[12]) || !zero(b + 13, 3) || !zero(b + 64, 4)) return Parse::bad;
    uint32_t size = get32(b + 48);
    if (size == 0) return Parse::bad;
    out->provider = static_cast<Provider>(b[12]);
    std::memcpy(out->token, b + 16, 16);
    std::memcpy(out->secret, b + 32, 16);
    out->buffer_size = size;
    out->cpu = get32(b + 52);
    out->host = get32(b + 56);
    out->group = get32(b + 60);
    return Parse::ok;
}

Parse parse_reply(std::span<const uint8_t> in, Reply *out) noexcept {
    Parse p = frame(in, kReplyMagic, kReplySize);
    if (p != Parse::ok) return p;
    const uint8_t *b = in.data();
    if (b[12] > static_cast<uint8_t>(Status::one_cpu) || !valid_provider(b[13]) ||
        !zero(b + 14, 2) || !zero(b + 20, 8))
        return Parse::bad;
    out->status = static_cast<Status>(b[12]);
    out->provider = static_cast<Provider>(b[13]);
    out->buffer_size = get32(b + 16);
    return Parse::ok;
}

} // namespace vipl::db
