// What the shareable-stream tests share: options, byte patterns, records whose
// contiguity a reader checks, numbered words several readers share out.
#pragma once

#include "helpers.h"

#include <atomic>
#include <cstring>
#include <string>

namespace vt {

// Default options with shareable set.
vipl::StreamOptions shareable();

std::span<const std::byte> bytes(const char *s);
std::string text(const std::byte *p, size_t n);

// Writes `total` bytes of pattern `seed` in blocking writes of `chunk` bytes.
bool write_pattern(vipl::Stream &s, uint64_t total, uint32_t seed, size_t chunk = 100000);
// Reads up to `total` bytes, checking pattern `seed`; returns how many matched in a row.
uint64_t read_pattern(vipl::Stream &s, uint64_t total, uint32_t seed);

// Records: a 16-byte header (magic, writer, sequence number, payload length) and a
// payload of pattern writer * 100003 + seq.  One blocking write each.
bool write_record(vipl::Stream &s, uint32_t writer, uint32_t seq, uint32_t len);
struct RecordCounts {
    static constexpr int kWriters = 16;
    std::atomic<uint32_t> records[kWriters];
    std::atomic<uint32_t> bad;     // any failure
    std::atomic<uint32_t> corrupt; // a record not whole, or out of order
    char error[200];
};
// Reads records until the end of the stream; each must be whole, each writer's numbered
// in order.  0, or a code with got.error saying what: 10 a read failed between records,
// 11 and 14 within one (the stream broke), 12, 13 and 15 a record was not whole or out
// of order (got.corrupt).
int read_records(vipl::Stream &s, RecordCounts &got);

// Words: the peer writes 8-byte words numbered 0..n-1; readers count what they get.
struct WordSeen {
    static constexpr uint64_t kMax = 1u << 20;
    std::atomic<uint8_t> count[kMax];
    std::atomic<uint64_t> by[8];
    std::atomic<uint32_t> bad;
};
// Reads whole words (a read may end inside one: the rest follows) until the end of the
// stream, as reader `who`.  0 or a code.
int read_words(vipl::Stream &s, WordSeen &seen, int who, uint64_t n);

} // namespace vt
