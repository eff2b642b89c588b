// The negotiation on the kernel connection, before any byte of the program's.
//
// A client that knows its server runs the interconnect (a same-host marker, or a rule for
// a remote destination: see rules.h) writes a HELLO as the connection's first bytes.  The
// server's interposer, at the first read (or write) of the accepted connection, sees it,
// serves a one-off rendezvous named by the HELLO's token, and answers with a REPLY.  The
// client then connects a VI stream to that rendezvous and proves itself with the HELLO's
// secret.  From then on the program's bytes ride the stream; the kernel connection stays
// open and idle (its credentials and addresses remain the kernel's).  A plain peer never
// sees either message: a client writes a HELLO only to a server that runs the
// interconnect, and a server writes a REPLY only to a client that sent a HELLO.
//
// Wire format (byte-order neutral: every integer big-endian):
//   HELLO, 72 bytes                           REPLY, 32 bytes
//    0  8 magic "VIPLHELO"                     0  8 magic "VIPLRPLY"
//    8  2 version (2)                          8  2 version (2)
//   10  2 length (72)                         10  2 length (32)
//   12  1 provider wanted (1 shm, 2 tcp)      12  1 status (Status below)
//   13  3 zero                                13  1 provider (1 shm, 2 tcp)
//   16 16 token: names the rendezvous         14  2 zero
//   32 16 secret: first bytes on the stream   16  4 buffer size the server takes
//   48  4 buffer size (stream payload bytes)  20  8 zero
//   52  4 cpu: the client's only CPU plus     28  4 check: FNV-1a of bytes 0..27
//          one (0: several, or unsaid)
//   56  4 host: the client's kernel (placement.h; 0: unsaid)
//   60  4 group: the client's scheduling group on that kernel (placement.h; 0: unsaid)
//   64  4 zero
//   68  4 check: FNV-1a of bytes 0..67
// The HELLO's first four bytes read as a big-endian length are above 10,000, so a plain
// PostgreSQL server that received one by mistake (a wrong rule) refuses it at once.
//
// The stream's first 24 bytes, from the client: the HELLO's secret (16) and how many
// bytes the program wrote on the kernel connection while the client waited for the
// REPLY (8, big-endian): the server reads those there before the stream.
//
// Thread and signal rules: pure functions on caller memory, async-signal-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace vipl::db {

enum class Provider : uint8_t { shm = 1, tcp = 2 };

enum class Status : uint8_t {
    ok = 0,          // a rendezvous waits: connect to it
    plain = 1,       // the server keeps the kernel connection (no resources, disabled...)
    bad_version = 2, // the server speaks no version the client offered: plain
    one_cpu = 3      // client and server run on one and the same CPU only: the kernel
                     // connection is the faster there (placement.h), plain
};

constexpr std::size_t kHelloSize = 72;
constexpr std::size_t kReplySize = 32;
constexpr std::size_t kMagicSize = 8;
constexpr uint16_t kVersion = 2;

struct Hello {
    Provider provider = Provider::shm;
    uint8_t token[16] = {};
    uint8_t secret[16] = {};
    uint32_t buffer_size = 0;
    uint32_t cpu = 0;   // the client's only CPU plus one; 0: several, or not said
    uint32_t host = 0;  // placement.h's tag of the client's kernel; 0: not said
    uint32_t group = 0; // placement.h's tag of the client's scheduling group; 0: not said
};

struct Reply {
    Status status = Status::plain;
    Provider provider = Provider::shm;
    uint32_t buffer_size = 0;
};

enum class Parse {
    need_more, // a prefix of a well-formed message: wait for the rest
    not_ours,  // not this message at all: the program's bytes
    bad,       // the magic, but broken (wrong length, check or field)
    ok
};

constexpr std::size_t kPrologueSize = 24;

// FNV-1a over n bytes, continuing from h: the messages' check, and placement.h's tags.
constexpr uint32_t kFnvBasis = 2166136261u;
uint32_t fnv1a(const void *data, std::size_t n, uint32_t h = kFnvBasis) noexcept;

void encode_hello(const Hello &h, uint8_t out[kHelloSize]) noexcept;
void encode_prologue(const uint8_t secret[16], uint64_t pre_bytes,
                     uint8_t out[kPrologueSize]) noexcept;
// Whether the prologue carries `secret` (compared in constant time); *pre_bytes then.
bool decode_prologue(const uint8_t in[kPrologueSize], const uint8_t secret[16],
                     uint64_t *pre_bytes) noexcept;
void encode_reply(const Reply &r, uint8_t out[kReplySize]) noexcept;

// Looks at the first bytes of a connection (any length, possibly short).
Parse parse_hello(std::span<const uint8_t> in, Hello *out) noexcept;
Parse parse_reply(std::span<const uint8_t> in, Reply *out) noexcept;

} // namespace vipl::db
