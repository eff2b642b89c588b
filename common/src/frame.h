// The wire format of a stream: every VI message starts with this 8-byte header, in
// network byte order (the tcp provider crosses hosts of either byte order).
//
//   byte 0     kind (Kind below)
//   byte 1     flags (kFlag* below; a receiver ignores bits it does not know)
//   bytes 2-3  credits returned to the receiver of this message: data messages it may
//              send in addition (any kind of message carries them)
//   bytes 4-7  payload length; 0 for every kind but data and rts
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>

namespace vipl::detail {

enum class Kind : uint8_t {
    data = 1,     // payload bytes of the stream; uses one credit
    credit = 2,   // credits only
    fin = 3,      // the sender writes no more; everything before it was sent
    fin_ack = 4,  // the receiver of a fin has taken every message up to it
    rts = 5,      // stream bytes the receiver RDMA-reads from the sender; uses one credit.
                  // Payload (kRtsSize): address u64, memory handle u32, length u32
    rts_done = 6, // the receiver has taken (or dropped) the bytes of the oldest rts
    stop = 7,     // the sender reads no more: the receiver's writes fail (broken pipe)
};

constexpr uint32_t kHeaderSize = 8;
constexpr uint32_t kRtsSize = 16;

// The bound on a stream buffer's payload: StreamOptions::buffer_size and
// VIPL_STREAM_BUFFER_SIZE both check against it.
constexpr uint32_t kMaxBufferSize = 16u << 20;
constexpr uint64_t kMaxMtu = uint64_t{kMaxBufferSize} + kHeaderSize;

// A stream VI's MaxTransferSize (equal at both ends: the connecting side's) carries the
// buffer size (header + payload, at most kMaxMtu) and, when the NIC takes it, room for
// RDMA reads larger than a buffer: a zero-copy write is read into the reader's buffer in
// pieces up to MaxTransferSize rather than one buffer (each piece is a system call on
// shm).  The accepting side takes the buffer size back out.
constexpr uint64_t kRdmaRoom = 32u << 20;
inline uint64_t vi_transfer_size(uint64_t mtu, uint64_t nic_max) {
    return mtu + kRdmaRoom <= nic_max ? mtu + kRdmaRoom : mtu;
}
inline uint64_t mtu_of_transfer_size(uint64_t transfer) {
    return transfer > kRdmaRoom ? transfer - kRdmaRoom : transfer;
}

// The sender takes no rts: the receiver must not offer it zero copy.  A shareable
// stream sets it on every message (its holders' memory is not one process's: an RDMA
// read into a program's buffer, a pull into heap memory would be one holder's only).
// The peer sees it on the first credit message, before it may send any data.
constexpr uint8_t kFlagNoRts = 1;
// On a fin: the sender closed the stream (it reads no more either), rather than only
// shutting down writing.  Sockets report the two differently (a unix socket hangs up).
constexpr uint8_t kFlagClosed = 2;
// On a fin: the sender's bytes go on over another channel from here (the socket
// interposer hands a connection back to its kernel socket, before an exec).
constexpr uint8_t kFlagSwitch = 4;

struct Header {
    Kind kind;
    uint16_t credits;
    uint32_t length;
    uint8_t flags = 0;
};

inline void encode(uint8_t *p, const Header &h) {
    p[0] = static_cast<uint8_t>(h.kind);
    p[1] = h.flags;
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
    return {static_cast<Kind>(p[0]), ntohs(c), ntohl(l), p[1]};
}

// The region an rts offers: an address in the sender, its memory handle, a length.
struct Rts {
    uint64_t addr;
    uint32_t handle;
    uint32_t length;
};

inline void encode_rts(uint8_t *p, const Rts &r) {
    uint32_t w[4] = {htonl(static_cast<uint32_t>(r.addr >> 32)),
                     htonl(static_cast<uint32_t>(r.addr)), htonl(r.handle), htonl(r.length)};
    std::memcpy(p, w, sizeof w);
}

inline Rts decode_rts(const uint8_t *p) {
    uint32_t w[4];
    std::memcpy(w, p, sizeof w);
    return {(uint64_t{ntohl(w[0])} << 32) | ntohl(w[1]), ntohl(w[2]), ntohl(w[3])};
}

} // namespace vipl::detail
