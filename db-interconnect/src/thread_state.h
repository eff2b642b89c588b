// What the interposer knows about the calling thread: whether it is inside the
// interposer already (its own calls to libvipl and the kernel pass straight through), and
// whether it runs a signal handler of the program (set by the trampoline in signals.cc).
//
// In a signal handler the interposer makes no connection of its own and takes no lock: a
// socket made there stays a plain kernel socket (psql's query cancel, PQcancel, connects
// from its SIGINT handler).  A handler left with siglongjmp never returns through the
// trampoline, so handler frames are remembered by stack address and forgotten once the
// thread runs above them again.
#pragma once

#include <cstdint>

// The library is loaded when the program starts (LD_PRELOAD, or linked), never by
// dlopen(), so its thread-local variables can live in the static TLS block: reached by
// an offset from the thread pointer rather than a __tls_get_addr() call at every
// poll(), send() or epoll_wait() (the default for a shared object).
#define VIPL_DB_TLS __attribute__((tls_model("initial-exec")))

namespace vipl::db {

struct ThreadState {
    int depth = 0; // > 0 while the interposer's own code runs on this thread
    int handlers = 0;
    uintptr_t handler_sp[8] = {};       // stack address of each handler frame in progress
    uint32_t interrupts = 0;            // handlers run (any)
    uint32_t interrupts_no_restart = 0; // of which without SA_RESTART
};

extern constinit thread_local ThreadState t_state VIPL_DB_TLS;

inline uintptr_t stack_here() {
    return reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
}

// Whether the thread runs one of the program's signal handlers now.
bool in_signal_handler() noexcept;

// Whether a call must go straight to the kernel: inside the interposer, or in a handler.
inline bool passthrough() noexcept {
    ThreadState &t = t_state;
    return t.depth > 0 || (t.handlers > 0 && in_signal_handler());
}

// Marks the interposer's own code on this thread (calls it makes pass straight through).
struct Inside {
    Inside() { ++t_state.depth; }
    ~Inside() { --t_state.depth; }
    Inside(const Inside &) = delete;
    Inside &operator=(const Inside &) = delete;
};

} // namespace vipl::db
