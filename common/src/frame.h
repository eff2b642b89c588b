// The wire format of a stream: every VI message starts with this 8-byte header, in
// network byte order (the tcp provider crosses hosts of either byte order).
//
//   byte 0     kind (Kind below)
//   byte 1     0 (reserved)
//   bytes 2-3  credits returned to the receiver of this message: data messages it may
//              send in addition (any kind of message carries them)
//   bytes 4-7  payload length; 0 for every kind but data
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>

namespace vipl::detail {

enum class Kind : uint8_t {
    data = 1,    // payload bytes of the stream; uses one credit
    credit = 2,  // credits only
    fin = 3,     // the sender writes no more; everything before it was sent
    fin_ack = 4, // the receiver of a fin has taken every message up to it
};

constexpr uint32_t kHeaderSize = 8;

struct Header {
    Kind kind;
    uint16_t credits;
    uint32_t length;
};

inline void encode(uint8_t *p, const Header &h) {
    p[0] = static_cast<uint8_t>(h.kind);
    p[1] = 0;
    uint16_t c = htons(h.credits);
    uint32_t l = htonl(h.length);
    std::memcpy(p + 2, &c, 2);
    std::memcpy(p + 4, &l, 4);
}

inline Header decode(const uint8_t *p) {
    uint16_t c;
    uint32_t l;
    std::memcpy(&c, p + 2, 2);
    std::memcpy(&l, p + 4, 4);
    return {static_cast<Kind>(p[0]), ntohs(c), ntohl(l)};
}

} // namespace vipl::detail
