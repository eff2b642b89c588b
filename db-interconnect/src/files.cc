#include "files.h"

#include <sys/mman.h>

namespace vipl::db {

// fd_direct's marks of fds 64 and up, one byte per fd number: of these 4 MiB only the pages
// of numbers in use are ever touched (the first page covers fds 0 to 4095).
std::atomic<uint8_t> detail::g_direct[kMaxFd];

// Every change sequentially consistent: fd_mark_direct's argument needs it.
void detail::set_direct(int fd, bool on) noexcept {
    if (fd < 64) {
        uint64_t bit = uint64_t{1} << fd;
        if (on)
            g_real.direct_low.fetch_or(bit, std::memory_order_seq_cst);
        else
            g_real.direct_low.fetch_and(~bit, std::memory_order_seq_cst);
    } else {
        g_direct[fd].store(on ? 1 : 0, std::memory_order_seq_cst);
    }
}

namespace {

constexpr int kChunkBits = 10;
constexpr int kChunk = 1 << kChunkBits;
constexpr int kTop = kMaxFd / kChunk;

using Slot = std::atomic<File *>;

std::atomic<Slot *> g_top[kTop];
std::atomic<int> g_highest{-1};

Slot *chunk(int fd, bool create) {
    std::atomic<Slot *> &top = g_top[fd >> kChunkBits];
    Slot *c = top.load(std::memory_order_acquire);
    if (c || !create) return c;
    // A fresh chunk: zero-filled anonymous memory is a chunk of empty slots.
    void *p = mmap(nullptr, sizeof(Slot) * kChunk, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    Slot *fresh = static_cast<Slot *>(p);
    if (top.compare_exchange_strong(c, fresh, std::memory_order_acq_rel)) return fresh;
    munmap(p, sizeof(Slot) * kChunk);
    return c;
}

Slot *slot(int fd, bool create) {
    if (fd < 0 || fd >= kMaxFd) return nullptr;
    Slot *c = chunk(fd, create);
    return c ? &c[fd & (kChunk - 1)] : nullptr;
}

// Takes a reference unless the count already reached zero (the file is being destroyed).
bool acquire_live(File *f) {
    uint32_t n = f->refs.load(std::memory_order_relaxed);
    while (n != 0)
        if (f->refs.compare_exchange_weak(n, n + 1, std::memory_order_acquire)) return true;
    return false;
}

} // namespace

File *fd_peek(int fd) noexcept {
    Slot *s = slot(fd, false);
    return s ? s->load(std::memory_order_acquire) : nullptr;
}

File *fd_acquire(int fd) noexcept {
    Slot *s = slot(fd, false);
    if (!s) return nullptr;
    for (;;) {
        File *f = s->load(std::memory_order_acquire);
        if (!f) return nullptr;
        if (acquire_live(f)) {
            if (s->load(std::memory_order_acquire) == f) return f;
            file_release(f);
        }
        // The slot changed under us (closed, reused): look again.
    }
}

File *fd_install(int fd, File *f) noexcept {
    Slot *s = slot(fd, true);
    if (!s) return nullptr;
    file_acquire(f);
    f->slots.fetch_add(1, std::memory_order_relaxed);
    int h = g_highest.load(std::memory_order_relaxed);
    while (fd > h && !g_highest.compare_exchange_weak(h, fd)) {
    }
    File *old = s->exchange(f, std::memory_order_seq_cst);
    detail::set_direct(fd, false);
    if (old) old->slots.fetch_sub(1, std::memory_order_relaxed);
    return old;
}

File *fd_remove(int fd) noexcept {
    Slot *s = slot(fd, false);
    File *old = s ? s->exchange(nullptr, std::memory_order_seq_cst) : nullptr;
    if (s) detail::set_direct(fd, false);
    if (old) old->slots.fetch_sub(1, std::memory_order_relaxed);
    return old;
}

void fd_mark_direct(int fd, const File *f) noexcept {
    if (fd < 0 || fd >= kMaxFd) return;
    // Mark, then look: a slot change that the look misses comes after the mark, and the
    // change clears it (every step sequentially consistent, the chunk's lookup too: a
    // slot in a chunk not mapped yet is empty).  The caller's reference keeps f from
    // being reused at this number meanwhile.
    real(); // a mark implies the real calls (files.h)
    detail::set_direct(fd, true);
    Slot *c = g_top[fd >> kChunkBits].load(std::memory_order_seq_cst);
    File *now = c ? c[fd & (kChunk - 1)].load(std::memory_order_seq_cst) : nullptr;
    if (now != f) detail::set_direct(fd, false);
}

void file_acquire(File *f) noexcept {
    f->refs.fetch_add(1, std::memory_order_relaxed);
}

bool file_try_acquire(File *f) noexcept {
    return acquire_live(f);
}

void file_release(File *f) noexcept {
    if (f->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) file_destroy(f);
}

int fd_highest() noexcept {
    return g_highest.load(std::memory_order_acquire);
}

void fd_for_each(void (*fn)(int fd, File *f, void *arg), void *arg) noexcept {
    int h = g_highest.load(std::memory_order_acquire);
    for (int fd = 0; fd <= h; ++fd) {
        if ((fd & (kChunk - 1)) == 0 && !g_top[fd >> kChunkBits].load()) {
            fd += kChunk - 1;
            continue;
        }
        if (File *f = fd_peek(fd)) fn(fd, f, arg);
    }
}

} // namespace vipl::db
