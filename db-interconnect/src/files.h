// The descriptors the interposer tracks: a table from the program's fd numbers to the
// state behind them (a socket's, an epoll set's), shared by every fd that refers to the
// same open file (dup, fork), as the kernel's own file table is.
//
// The table has no size limit of its own: two levels of lazily mapped chunks cover fd
// numbers up to kMaxFd (4 Mi), beyond any RLIMIT_NOFILE a kernel allows by default;
// higher numbers are never tracked (they pass straight to the kernel).
//
// Lifetime: a File counts references: one per fd slot that holds it, one per call in
// progress on it.  Lookups take theirs without a lock (increment unless zero, then check
// the slot still holds it): File objects are never unmapped, only reused, so a lookup
// racing with the last close touches valid memory and retries.  The last reference
// destroys the state (file_destroy) and returns the object to its pool.
//
// Thread rules: every function is thread-safe.  fd_peek is async-signal-safe; the others
// are not (they may destroy state).
#pragma once

#include <atomic>
#include <cstdint>

#include "real.h"

namespace vipl::db {

struct File {
    enum class Kind : uint8_t { sock, epoll };
    explicit File(Kind k) : kind(k) {}
    const Kind kind;
    std::atomic<uint32_t> refs{0};
    std::atomic<uint32_t> slots{0}; // fd numbers of this process that refer to it
};

constexpr int kMaxFd = 1 << 22;

// The File in slot fd, without a reference (for "is it ours" checks only).
File *fd_peek(int fd) noexcept;
// The File in slot fd with a reference the caller releases, or null.
File *fd_acquire(int fd) noexcept;
// Installs f in slot fd (taking a reference for the slot).  Returns the previous
// occupant's slot reference, or null: the caller releases it.
File *fd_install(int fd, File *f) noexcept;
// Empties slot fd; returns its reference (the caller releases it), or null.
File *fd_remove(int fd) noexcept;

// Data calls on a descriptor that stays the kernel's for good (no state behind it, or a
// plain socket with nothing of ours left to give back) should cost the program nothing
// more than the kernel's own: fd_direct reads one mark per fd number, no table walk and
// no File.  The marks of fds 0 to 63 (a server's sockets, mostly) are bits in the real
// calls' first cache line (real.h), the others one byte each.  fd_mark_direct(fd, f),
// called with a reference on f (or f null: an empty slot), sets it while slot fd still
// holds f; any change of the slot clears it.  Both async-signal-safe.  A set mark implies
// the real calls are loaded: the wrappers that find one call g_real's entry directly.
namespace detail {
extern std::atomic<uint8_t> g_direct[kMaxFd];
void set_direct(int fd, bool on) noexcept;
} // namespace detail
inline bool fd_direct(int fd) noexcept {
    if (static_cast<unsigned>(fd) < 64)
        return (g_real.direct_low.load(std::memory_order_acquire) >> fd) & 1;
    return static_cast<unsigned>(fd) < static_cast<unsigned>(kMaxFd) &&
           detail::g_direct[fd].load(std::memory_order_acquire);
}
void fd_mark_direct(int fd, const File *f) noexcept;
// Clears fd's mark (the state behind it changed: an epoll set gained a member).
inline void fd_clear_direct(int fd) noexcept {
    if (static_cast<unsigned>(fd) < static_cast<unsigned>(kMaxFd)) detail::set_direct(fd, false);
}

void file_acquire(File *f) noexcept;
// A reference unless the file is being destroyed (its count reached zero).
bool file_try_acquire(File *f) noexcept;
// Drops a reference; the last one calls file_destroy.
void file_release(File *f) noexcept;
// Tears down the state behind f and returns it to its pool (sock.cc, epoll_set.cc).
void file_destroy(File *f) noexcept;

// Calls fn(fd, file) for every occupied slot up to the highest fd ever installed (no
// references taken: for fork and exec, when the caller knows the table is quiet).
void fd_for_each(void (*fn)(int fd, File *f, void *arg), void *arg) noexcept;
// The highest fd number ever installed (-1: none).
int fd_highest() noexcept;

// A reference held for the length of a call.
class FileRef {
public:
    FileRef() = default;
    explicit FileRef(File *f) : f_(f) {}
    FileRef(FileRef &&o) noexcept : f_(o.f_) { o.f_ = nullptr; }
    FileRef &operator=(FileRef &&o) noexcept {
        if (this != &o) {
            reset();
            f_ = o.f_;
            o.f_ = nullptr;
        }
        return *this;
    }
    ~FileRef() { reset(); }
    void reset() {
        if (f_) file_release(f_);
        f_ = nullptr;
    }
    File *get() const { return f_; }
    explicit operator bool() const { return f_ != nullptr; }

private:
    File *f_ = nullptr;
};

} // namespace vipl::db
