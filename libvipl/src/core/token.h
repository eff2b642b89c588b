// The process token: this process as distinct from every other (pids are
// reused, and a process may exec another program under the same pid).  Holder
// sets and sole sections name processes by it; a fork child gets a new one.
#pragma once

#include <atomic>
#include <cstdint>

namespace vipl {

extern std::atomic<uint64_t> g_self_token;
uint64_t self_token_first();
// Never 0 (bit 0 is always set).
inline uint64_t self_token() {
    uint64_t t = g_self_token.load(std::memory_order_relaxed);
    return t ? t : self_token_first();
}
void renew_self_token();
// A token for another process (a fork child about to be), and taking it.
uint64_t new_token();
void set_self_token(uint64_t t);

} // namespace vipl
