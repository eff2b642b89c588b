#include "share_util.h"

namespace vt {

namespace {

constexpr uint32_t kMagic = 0x52454344; // "RECD"

} // namespace

vipl::StreamOptions shareable() {
    vipl::StreamOptions o;
    o.shareable = true;
    return o;
}

std::span<const std::byte> bytes(const char *s) {
    return {reinterpret_cast<const std::byte *>(s), std::strlen(s)};
}

std::string text(const std::byte *p, size_t n) {
    return std::string(reinterpret_cast<const char *>(p), n);
}

bool write_pattern(vipl::Stream &s, uint64_t total, uint32_t seed, size_t chunk) {
    std::vector<std::byte> buf(chunk);
    for (uint64_t off = 0; off < total;) {
        size_t n = std::min<uint64_t>(chunk, total - off);
        fill(buf.data(), n, off, seed);
        if (!write_all(s, buf.data(), n)) return false;
        off += n;
    }
    return true;
}

uint64_t read_pattern(vipl::Stream &s, uint64_t total, uint32_t seed) {
    std::vector<std::byte> buf(70000);
    uint64_t off = 0;
    while (off < total) {
        std::error_code ec;
        size_t want = std::min<uint64_t>(buf.size(), total - off);
        size_t n = s.read({buf.data(), want}, vipl::deadline_in(std::chrono::seconds(20)), ec);
        if (ec == std::errc::interrupted) continue;
        if (ec || n == 0) break;
        if (check(buf.data(), n, off, seed) >= 0) break;
        off += n;
    }
    return off;
}

bool write_record(vipl::Stream &s, uint32_t writer, uint32_t seq, uint32_t len) {
    std::vector<std::byte> buf(16 + len);
    uint32_t h[4] = {kMagic, writer, seq, len};
    std::memcpy(buf.data(), h, sizeof h);
    fill(buf.data() + 16, len, 0, writer * 100003 + seq);
    std::error_code ec;
    // Whole or nothing: a part would let another holder's bytes in between.
    return s.write(buf, ec) == buf.size() && !ec;
}

int read_records(vipl::Stream &s, RecordCounts &got) {
    auto fail = [&](int code, const std::string &what) {
        got.bad++;
        if (code == 12 || code == 13 || code == 15) got.corrupt++;
        std::snprintf(got.error, sizeof got.error, "%s", what.c_str());
        return code;
    };
    std::vector<std::byte> payload;
    for (;;) {
        uint32_t h[4];
        std::error_code ec;
        size_t n = s.read({reinterpret_cast<std::byte *>(h), 1},
                          vipl::deadline_in(std::chrono::seconds(20)), ec);
        if (n == 0 && !ec) return 0; // the end, between two records
        if (n != 1) return fail(10, "read: " + ec.message());
        if (!read_exact(s, reinterpret_cast<std::byte *>(h) + 1, 15)) return fail(11, "header");
        if (h[0] != kMagic || h[1] >= RecordCounts::kWriters || h[3] > (16u << 20))
            return fail(12, "not a record header: bytes of another write in between");
        if (h[2] != got.records[h[1]].load())
            return fail(13, "writer " + std::to_string(h[1]) + ": record " + std::to_string(h[2]) +
                                " out of order");
        payload.resize(h[3]);
        if (!read_exact(s, payload.data(), h[3])) return fail(14, "payload");
        if (check(payload.data(), h[3], 0, h[1] * 100003 + h[2]) >= 0)
            return fail(15, "payload of writer " + std::to_string(h[1]) + " record " +
                                std::to_string(h[2]) + " mixed with other bytes");
        got.records[h[1]]++;
    }
}

int read_words(vipl::Stream &s, WordSeen &seen, int who, uint64_t n) {
    std::byte buf[8 * 64];
    size_t have = 0; // bytes of a word begun by the last read
    for (;;) {
        std::error_code ec;
        size_t k = s.read({buf + have, sizeof buf - have},
                          vipl::deadline_in(std::chrono::seconds(20)), ec);
        if (ec == std::errc::interrupted) continue;
        if (ec) return 10;
        if (k == 0) return have ? 11 : 0;
        have += k;
        size_t whole = have / 8 * 8;
        for (size_t i = 0; i < whole; i += 8) {
            uint64_t w;
            std::memcpy(&w, buf + i, 8);
            if (w >= n || w >= WordSeen::kMax) {
                seen.bad++;
                continue;
            }
            seen.count[w]++;
            seen.by[who]++;
        }
        std::memmove(buf, buf + whole, have - whole);
        have -= whole;
    }
}

} // namespace vt
