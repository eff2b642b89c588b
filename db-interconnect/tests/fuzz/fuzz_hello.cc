// The negotiation decoder (src/hello.cc) against any bytes a peer or a port scanner may
// send first.  Beyond "no crash, no out-of-bounds access" (the sanitizers), it checks
// the decoder's promises: what parses re-encodes to the same bytes, every proper prefix
// of a well-formed message asks for more, and a message that does not start with the
// magic is never taken for one.
#include "hello.h"

#include <cstdlib>
#include <cstring>

using namespace vipl::db;

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::span<const uint8_t> in(data, size);
    Hello h;
    Parse p = parse_hello(in, &h);
    if (p == Parse::ok) {
        uint8_t out[kHelloSize];
        encode_hello(h, out);
        check(std::memcmp(out, data, kHelloSize) == 0);
        for (size_t k = 0; k < kHelloSize; ++k)
            check(parse_hello(std::span(out, k), &h) == Parse::need_more);
    }
    if (size >= 8 && std::memcmp(data, "VIPLHELO", 8) != 0) check(p == Parse::not_ours);
    Reply r;
    Parse q = parse_reply(in, &r);
    if (q == Parse::ok) {
        uint8_t out[kReplySize];
        encode_reply(r, out);
        check(std::memcmp(out, data, kReplySize) == 0);
        for (size_t k = 0; k < kReplySize; ++k)
            check(parse_reply(std::span(out, k), &r) == Parse::need_more);
    }
    if (size >= 8 && std::memcmp(data, "VIPLRPLY", 8) != 0) check(q == Parse::not_ours);
    // A hello is never a reply and a reply never a hello.
    check(!(p == Parse::ok && q == Parse::ok));
    return 0;
}
