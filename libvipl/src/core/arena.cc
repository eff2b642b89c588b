#include "core/arena.h"

#include "core/config.h"
#include "core/log.h"
#include "core/mutex.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <sys/mman.h>
#include <unistd.h>

namespace vipl {
namespace {

constexpr uint64_t kMagic = 0x7669706c6172656eull;
constexpr int kClasses = 21; // 64 B .. 64 MiB

struct Header {
    uint64_t magic;
    Mutex lock; // robust: a process may die holding it
    uint64_t size;
    uint64_t bump;
    uint64_t free_[kClasses]; // offset of the first free block of each class, 0 = none
    uint64_t kind_free[kArenaKinds];
};

char *g_base = nullptr;
size_t g_size = 0;
std::once_flag g_once;

int class_of(size_t bytes) {
    int k = 0;
    while ((64ull << k) < bytes) ++k;
    return k;
}

void create() {
    size_t mb = config().shared_arena_mb;
    size_t size = mb << 20;
    void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        VIPL_ERROR("cannot reserve the shared arena (%zu MiB): %s", mb, strerror(errno));
        return;
    }
    auto *h = new (p) Header{};
    h->magic = kMagic;
    h->lock.make_robust();
    h->size = size;
    h->bump = (sizeof(Header) + 4095) & ~size_t(4095);
    g_base = static_cast<char *>(p);
    g_size = size;
}

Header *header() {
    std::call_once(g_once, create);
    return reinterpret_cast<Header *>(g_base);
}

} // namespace

void *shared_alloc(size_t bytes) {
    Header *h = header();
    if (!h || bytes == 0) return nullptr;
    int k = class_of(bytes);
    if (k >= kClasses) return nullptr;
    size_t cls = 64ull << k;
    std::lock_guard<Mutex> g(h->lock);
    h->lock.clear_owner_died(); // a dead holder may leak a block, never more
    if (uint64_t off = h->free_[k]) {
        char *p = g_base + off;
        h->free_[k] = *reinterpret_cast<uint64_t *>(p);
        memset(p, 0, cls);
        return p;
    }
    uint64_t align = cls < 4096 ? cls : 4096;
    uint64_t at = (h->bump + align - 1) & ~(align - 1);
    if (at + cls > h->size) return nullptr;
    h->bump = at + cls;
    return g_base + at; // never used: zero already
}

void shared_free(void *p, size_t bytes) {
    if (!p) return;
    Header *h = header();
    int k = class_of(bytes);
    std::lock_guard<Mutex> g(h->lock);
    h->lock.clear_owner_died();
    *reinterpret_cast<uint64_t *>(p) = h->free_[k];
    h->free_[k] = static_cast<uint64_t>(static_cast<char *>(p) - g_base);
}

void *shared_alloc_kind(size_t bytes, int kind) {
    Header *h = header();
    if (!h || kind < 0 || kind >= kArenaKinds) return nullptr;
    {
        std::lock_guard<Mutex> g(h->lock);
        h->lock.clear_owner_died();
        if (uint64_t off = h->kind_free[kind]) {
            char *p = g_base + off;
            h->kind_free[kind] = *reinterpret_cast<uint64_t *>(p);
            return p; // the caller constructs over it
        }
    }
    return shared_alloc(bytes);
}

void shared_free_kind(void *p, int kind) {
    if (!p) return;
    Header *h = header();
    std::lock_guard<Mutex> g(h->lock);
    h->lock.clear_owner_died();
    *reinterpret_cast<uint64_t *>(p) = h->kind_free[kind];
    h->kind_free[kind] = static_cast<uint64_t>(static_cast<char *>(p) - g_base);
}

bool is_shared(const void *p) {
    const char *c = static_cast<const char *>(p);
    return g_base && c >= g_base && c < g_base + g_size;
}

void *object_alloc(size_t bytes, bool shared) {
    if (shared) return shared_alloc(bytes);
    void *p = calloc(1, bytes);
    return p;
}

void object_free(void *p, size_t bytes, bool shared) {
    if (shared)
        shared_free(p, bytes);
    else
        free(p);
}

} // namespace vipl
