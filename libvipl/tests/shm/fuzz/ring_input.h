// The input of fuzz_ring: a configuration byte, then a program of operations by
// which the fuzzer plays the hostile peer of a shm connection, writing its side of the
// connection memory directly (its out ring, which the victim reads, and its control
// block), and making the victim run between them.  gen_corpus writes seeds in it.
//
// Every operation is an opcode byte (taken modulo kOpCount) and its arguments, fixed
// little-endian fields read from the input; an input that ends early reads zeros.
#pragma once

#include <cstdint>

namespace vt {

// Configuration byte.
constexpr uint8_t kCfgReliability = 0x03; // 0 unreliable, 1 delivery, 2 reception, 3 delivery
constexpr uint8_t kCfgRecvShift = 2;      // bits 2-4: VI mode, receives posted (0-7)
constexpr uint8_t kCfgRecvMask = 0x1c;
constexpr uint8_t kCfgStream = 0x20;    // the victim is a common Stream, not a bare VI
constexpr uint8_t kCfgShareable = 0x40; // stream mode: a shareable stream; VI mode: RDMA on
constexpr uint8_t kCfgLargeMtu = 0x80;  // VI mode: MaxTransferSize 65536, else 1024

enum Op : uint8_t {
    kOpSend,     // u16 len, u8 flags, u32 imm: a well-formed send of len pattern bytes
    kOpRaw,      // u8 type, u16 flags, u32 len, u32 imm, u8 words: header + words*4 body bytes
    kOpFrag,     // u8 kind, u8 flags, u32 offset, u32 total, u8 target, u32 raddr, u16 chunk
    kOpSendGet,  // u16 nseg, u32 pid, u32 len, then nseg (u64 addr, u64 len) (at most 8 read)
    kOpReadReq,  // u8 target, u32 raddr, u32 total, u64 req
    kOpReadResp, // u64 req, u32 offset, u32 total, u32 status, u16 chunk, u8 flags
    kOpError,    // u32 code
    kOpPad,      // a pad record to the end of the ring
    kOpSeq,      // u8 mode, u32 value: a sequence word at the next position
    kOpPoke,     // u32 offset, u32 value: anywhere in the ring, published or not
    kOpConsumed, // u8 mode, u64 value: the peer's consumed counter
    kOpState,    // u32 state, u32 reason, u64 broken_at: the peer's end
    kOpWaiter,   // u64 waiter, u32 cpu: the peer's doorbell word and CPU
    kOpHeader,   // u8 field, u32 value: the shared header and the peer's fixed words
    kOpProgress, // u8 calls: the victim makes progress (Done calls, stream reads)
    kOpPost,     // u8 what, u16 len: the victim posts its own operation / writes
    kOpRace,     // u8 field, u16 rounds: a thread rewrites a published record meanwhile
    kOpHonest,   // a message each way on the victim's other, honest connection
    kOpFrame,    // u8 kind, u8 flags, u16 credits, u32 length, u16 data: a stream frame
    kOpRewound,  // u8 mode, u64 value: the rewound_at word (even: the writer goes back to
                 // the ring's start from its position, as a sender does; odd: value)
    kOpCount,
};

// kOpFrag / kOpReadReq targets: where in the victim the address points.
enum Target : uint8_t {
    kTargetWindow,   // the RDMA window (write and read allowed), + raddr % window
    kTargetReadOnly, // RDMA read only
    kTargetCanary,   // registered, no RDMA
    kTargetRaw,      // raddr as given (a wild address)
    kTargetCount,
};

// kOpConsumed modes.
enum ConsumedMode : uint8_t {
    kConsumedHonest, // everything the victim produced
    kConsumedAhead,  // produced + value
    kConsumedBack,   // produced - value
    kConsumedRaw,    // value
    kConsumedCount,
};

// kOpSeq modes.
enum SeqMode : uint8_t {
    kSeqRight,   // the right word over whatever header lies there
    kSeqNextLap, // the word of the same slot one lap later
    kSeqRaw,     // value
    kSeqCount,
};

// kOpHeader fields.
enum HeaderField : uint8_t {
    kHdrMagic,
    kHdrRingSize,
    kHdrHeaderSize,
    kHdrPeerPid,
    kHdrPeerPtag,
    kHdrPeerRdma,
    kHdrPeerCanAccess,
    kHdrPeerShareable,
    kHdrCount,
};

// kOpRace fields rewritten while the victim reads.
enum RaceField : uint8_t {
    kRaceLen,  // a send's length, between its own and 0xffffffff
    kRaceType, // its type, between send and every other
    kRaceNseg, // a SEND-GET's segment count
    kRaceCount,
};

} // namespace vt
