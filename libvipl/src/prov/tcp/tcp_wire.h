// The tcp provider's wire format.  Everything on the wire is big-endian,
// whatever the hosts: descriptors stay in host order for the program and are
// converted here, so a little-endian and a big-endian peer understand each other.
//
// Handshake messages are fixed-size records; the data path is a stream of
// frames, each a 24-byte header followed by `length` payload bytes:
//
//   type u8 | flags u8 | zero u16 | length u32 | imm u32 | handle u32 | addr u64
//
//   kSend          payload = message; imm (kImm); kAckReq
//   kRdmaWrite     payload = data for [addr, +length) in region `handle`; imm (kImm)
//   kRdmaReadReq   no payload; imm = bytes to read from [addr, +imm) in region `handle`
//   kRdmaReadResp  payload = the bytes read, for the oldest read not yet answered;
//                  handle = 0, or VIP_STATUS_RDMA_PROT_ERROR (then no payload)
//   kAck           no payload; addr = acknowledged messages since the connection
//                  began (cumulative).  Acknowledged are every RDMA write and
//                  the sends flagged kAckReq: they complete at the initiator
//                  only then (placed in the target's memory).
//   kError         no payload; addr = sequence number (among acknowledged
//                  messages) of the message that failed, or kNoSequence;
//                  imm = VIP_ERROR_CODE the receiver's VI fails with, or
//                  kNoError (unreliable: only the descriptor fails)
//   kCredit        no payload; addr = bytes of the stream the receiver has
//                  taken from its socket (cumulative)
//
// Flow control: a sender keeps at most the receiver's window (from its
// Hello) of frame bytes not yet credited, and frames with a payload wait
// for credit.  The receiver's socket buffer holds that much, so its TCP
// window never closes however long its program stops calling the library,
// and a silent link stays the only way a connection times out.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vipl::tcp {

constexpr uint32_t kWireMagic = 0x5654435a; // "VTCZ"
constexpr uint16_t kWireVersion = 1;
constexpr size_t kFrameHeader = 24;

enum FrameType : uint8_t {
    kSend = 1,
    kRdmaWrite,
    kRdmaReadReq,
    kRdmaReadResp,
    kAck,
    kError,
    kCredit,
    kFrameTypeEnd,
};

// kAckReq (sends only): the receiver acknowledges the message once placed;
// RDMA writes are always acknowledged.
enum FrameFlags : uint8_t { kImm = 1, kAckReq = 2 };

constexpr uint64_t kNoSequence = ~0ull;
constexpr uint32_t kNoError = ~0u;
constexpr uint32_t kReadRefused = 0x80; // VIP_STATUS_RDMA_PROT_ERROR, spelled out for the wire

struct Frame {
    uint8_t type;
    uint8_t flags;
    uint32_t length;
    uint32_t imm;
    uint32_t handle;
    uint64_t addr;
};

// Writes h into out[kFrameHeader] in wire order.
void encode_frame(const Frame &f, uint8_t *out);

enum class Decode { ok, bad_type, bad_flags, bad_reserved, too_long, bad_fields };

// Reads and checks a header.  max_payload bounds `length` (the connection's
// MaxTransferSize).  Anything not ok means the peer is broken or hostile:
// the connection must be closed.
Decode decode_frame(const uint8_t *in, uint64_t max_payload, Frame *out);
const char *decode_error_text(Decode d);

// Fixed-size handshake records (all fields in wire order on the wire).
// Request (client-server) or PeerRequest -> Accept or Reject; Accept -> Ack.
enum HelloType : uint32_t {
    kHelloRequest = 1,
    kHelloPeerRequest,
    kHelloAccept,
    kHelloReject,
    kHelloAck,
};

constexpr size_t kMaxHostAddress = 16;
constexpr size_t kMaxDisc = 64;

struct Hello {
    uint32_t type;
    uint32_t reliability;
    uint64_t mtu;
    uint32_t rdma;               // 1 write, 2 read enabled on the sender's VI
    uint32_t reason;             // reject: the VIP_RETURN the requester gets
    uint16_t host_len, disc_len; // the sender's address
    uint16_t want_len;           // the discriminator asked for
    uint8_t host[kMaxHostAddress];
    uint8_t disc[kMaxDisc];
    uint8_t want[kMaxDisc];
    uint32_t window; // bytes of stream the sender's socket holds for its peer
};
constexpr size_t kHelloWire =
    4 + 2 + 4 + 4 + 8 + 4 + 4 + 2 + 2 + 2 + kMaxHostAddress + 2 * kMaxDisc + 4;
constexpr uint32_t kMinWindow = 4096;

void encode_hello(const Hello &h, uint8_t *out);
// False if the record is malformed (bad magic/version, lengths out of range).
bool decode_hello(const uint8_t *in, Hello *out);

} // namespace vipl::tcp
