// Shared by the wrappers (api_*.cc): looking up a tracked descriptor, and the rule that
// nothing is thrown into the C library's callers.
#pragma once

#include "epoll_set.h"
#include "files.h"
#include "sock.h"
#include "thread_state.h"

#include <cerrno>
#include <new>

namespace vipl::db {

inline Sock *as_sock(File *f) {
    return f && f->kind == File::Kind::sock ? static_cast<Sock *>(f) : nullptr;
}

inline EpollSet *as_epoll(File *f) {
    return f && f->kind == File::Kind::epoll ? static_cast<EpollSet *>(f) : nullptr;
}

// A tracked socket of the calling program, or null (the call goes to the kernel).
inline Sock *tracked(int fd) {
    if (passthrough()) return nullptr;
    return as_sock(fd_peek(fd));
}

// Runs a wrapper's body; a failure to allocate becomes ENOMEM, never an exception.
template <class F>
auto guarded(F &&body, decltype(body()) on_error) noexcept -> decltype(body()) {
    try {
        return body();
    } catch (const std::bad_alloc &) {
        errno = ENOMEM;
    } catch (...) {
        errno = EIO;
    }
    return on_error;
}

// Replaces what slot fd held with f (or nothing), releasing the previous occupant.
inline void replace_slot(int fd, File *f) {
    File *old = f ? fd_install(fd, f) : fd_remove(fd);
    if (old) file_release(old);
}

} // namespace vipl::db
