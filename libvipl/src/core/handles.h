// Handle tables: opaque VIPL handles that can be checked, never trusted.
//
// A handle is tag(8) | generation(24) | index(32).  Each process has its own
// table; a slot points at the object.  Objects are type-stable: their memory
// is only ever reused for an object of the same type, so a stale or racing
// lookup reads a valid object and then fails the generation check instead of
// touching freed memory.  Callers that need the object to stay theirs
// re-check still() under the object's lock.
//
// After fork() the child's table is a copy: it names exactly the objects that
// existed then.  A private object is refused there (its owner is the parent);
// a shareable one lives in the shared arena and is usable by the processes in
// its holder set, which the fork child handler extends.
#pragma once

#include "core/arena.h"
#include "core/mutex.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <sys/mman.h>
#include <vector>

namespace vipl {

// getpid(), cached (glibc makes it a system call).
int self_pid();

enum class HandleTag : uint8_t { nic = 0xA1, ptag = 0xA2, vi = 0xA3, cq = 0xA4, conn = 0xA5 };

// The processes that may use a shareable object.
struct Holders {
    static constexpr int kMax = 64;
    std::atomic<uint64_t> token[kMax];
    std::atomic<int32_t> pid[kMax];
    std::atomic<uint32_t> epoch; // bumped when the set is reset
    // The census (mutex.h): one load tells a holder whether it is the only
    // one, which lets its lock skip the locked instructions.  Every place
    // taken or freed changes it, after the place itself.
    std::atomic<uint64_t> census{0};
    void census_change(uint64_t t, int d);

    bool has(uint64_t t) const;
    // Adds t (pid p; 0 while a fork child does not know its pid yet); when
    // full, the places of holders that are gone are taken back first.
    bool add(uint64_t t, int32_t p);
    // Gives t's place its pid; false if t holds no place.
    bool set_pid(uint64_t t, int32_t p);
    void remove(uint64_t t);
    void reset(uint64_t t, int32_t p); // only t
    // Whether a live process other than the one named by t holds it (places
    // of the dead are freed on the way).
    bool others_alive(uint64_t t);
    // How many live processes other than t hold it (the same way).
    int live_others(uint64_t t);
    // Frees the places of holders other than t that are gone.
    void reap(uint64_t t);
    // Whether the holder t (in the set or not) is a live process.
    bool alive(uint64_t t) const;
};

// Holders::alive for a lock's SoleSet.
inline bool holders_alive(const void *set, uint64_t token) {
    return static_cast<const Holders *>(set)->alive(token);
}

// Makes this process recognisable as alive to other holders (an abstract
// socket named after its token, closed by exit, kill and exec alike).
void holder_mark();
// This process holds `delta` more (or fewer) shareable objects.  When it
// holds none any more it drops its mark and what it inherited for them.
void holding_changed(int delta);

// owner and shareable are atomic: a lookup racing a destroy reads them from an
// object being recycled (and then fails its generation check).
struct Object {
    uint32_t index = 0;
    std::atomic<uint64_t> owner{0}; // self_token() of the creating process
    std::atomic<bool> shareable{false};
    Holders *holders = nullptr; // shareable objects only (in the arena)

    // Back to no owner, for an object reused in place (its lock held).
    void forget_identity() {
        index = 0;
        owner = 0;
        shareable = false;
        holders = nullptr;
    }

    bool usable_here() const {
        return shareable ? holders->has(self_token()) : owner == self_token();
    }
};

struct NoLocal {};

// LeakSanitizer's, present only in a build with it.
extern "C" void __lsan_register_root_region(const void *p, size_t size) __attribute__((weak));

// An array of n zero-valued E on fresh anonymous pages (E's zero is all bits clear: atomic
// pointers), never freed: a handle table lives as long as its process.  Without memory
// for it the library cannot work at all.
template <class E>
E *zeroed_directory(size_t n) {
    void *p =
        mmap(nullptr, n * sizeof(E), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    // A leak checker scans the heap and globals, not our own mappings: the chunks the
    // directory points at are not lost.
    if (__lsan_register_root_region) __lsan_register_root_region(p, n * sizeof(E));
    return static_cast<E *>(p);
}

// Objects with a lock are handed out locked by create(): a thread that still
// holds a pointer from before (a CQ's member list, a lookup racing a destroy)
// locks it and finds it not alive until its creator has filled it in.
template <class T>
concept HasLock = requires(T &o) {
    o.lock.lock();
};
// Objects that reset their fields in place (under their lock) when reused:
// their lock is never rebuilt under a thread that is waiting for it.
template <class T>
concept Recyclable = requires(T &o) {
    o.recycle();
};

template <class T, HandleTag Tag, class Local = NoLocal>
class HandleTable {
public:
    static constexpr uint32_t kChunkBits = 10;
    static constexpr uint32_t kChunk = 1u << kChunkBits;
    static constexpr uint32_t kMaxChunks = 1u << 14; // 16M objects

    struct Slot {
        std::atomic<T *> obj{nullptr};
        std::atomic<uint32_t> gen{0};      // odd while the slot is live
        std::atomic<uint32_t> verified{0}; // shareable: holder-set epoch + 1 found to include us
        Local local{};
    };

    // Makes a new object (in the arena if shareable) in a new live slot;
    // nullptr when max_objects are in use or memory is short.  An object with
    // a lock comes back holding it (robust if shareable): the caller unlocks
    // it once filled in.
    T *create(uint32_t max_objects, bool shareable) {
        T *obj = take_object(shareable);
        if (!obj) return nullptr;
        std::lock_guard<Mutex> g(lock_);
        if (live_ >= max_objects || !grow_for_one()) {
            if constexpr (HasLock<T>) obj->lock.unlock();
            give_back(obj);
            return nullptr;
        }
        uint32_t index = free_.empty() ? next_++ : free_.back();
        if (!free_.empty() && free_.back() == index) free_.pop_back();
        Slot &s = slot(index);
        obj->index = index;
        obj->owner = self_token();
        obj->shareable = shareable;
        if (shareable) {
            obj->holders->reset(obj->owner, self_pid());
            holding_changed(1);
        }
        s.local = Local{};
        s.verified.store(0, std::memory_order_relaxed);
        s.obj.store(obj, std::memory_order_release);
        s.gen.fetch_add(1, std::memory_order_acq_rel); // even -> odd: live
        ++live_;
        return obj;
    }

    // Makes obj's handles stale here while its slot stays its own (local()
    // still names its state): threads inside a call on it find it gone at
    // their next look.  release() follows.
    void retire(T *obj) {
        Slot &s = slot(obj->index);
        if (s.gen.load(std::memory_order_relaxed) & 1)
            s.gen.fetch_add(1, std::memory_order_seq_cst);
    }

    // Forgets obj in this process: its handles here become stale.  The object
    // itself is destroyed (and recycled) only if destroy is true.
    void release(T *obj, bool destroy) {
        retire(obj);
        Slot &s = slot(obj->index);
        s.obj.store(nullptr, std::memory_order_release);
        {
            std::lock_guard<Mutex> g(lock_);
            free_.push_back(obj->index);
            --live_;
        }
        bool shared = obj->shareable;
        if (destroy) give_back(obj);
        if (shared) holding_changed(-1);
    }

    void *handle_of(const T *obj) const {
        uint64_t gen = slot(obj->index).gen.load(std::memory_order_relaxed) & 0xFFFFFF;
        uint64_t h = (static_cast<uint64_t>(Tag) << 56) | (gen << 32) | obj->index;
        return reinterpret_cast<void *>(h);
    }

    // The live object a handle names, usable by this process, or nullptr.
    __attribute__((always_inline)) T *lookup(const void *handle) const {
        uint64_t h = reinterpret_cast<uint64_t>(handle);
        if ((h >> 56) != static_cast<uint64_t>(Tag)) return nullptr;
        uint32_t index = static_cast<uint32_t>(h);
        const Slot *s = find_slot(index);
        if (!s) return nullptr;
        uint32_t gen = s->gen.load(std::memory_order_acquire);
        if (!(gen & 1) || (gen & 0xFFFFFF) != ((h >> 32) & 0xFFFFFF)) return nullptr;
        T *obj = s->obj.load(std::memory_order_acquire);
        if (!obj) return nullptr;
        if (!obj->shareable) return obj->owner == self_token() ? obj : nullptr;
        // Membership only changes when the set is reset (epoch) or we leave it.
        uint32_t want = obj->holders->epoch.load(std::memory_order_acquire) + 1;
        if (s->verified.load(std::memory_order_relaxed) == want) return obj;
        if (!obj->holders->has(self_token())) return nullptr;
        const_cast<Slot *>(s)->verified.store(want, std::memory_order_relaxed);
        return obj;
    }

    // Whether obj still is the object handle named here (call under obj's lock).
    __attribute__((always_inline)) bool still(const T *obj, const void *handle) const {
        uint64_t h = reinterpret_cast<uint64_t>(handle);
        const Slot &s = slot(obj->index);
        uint32_t gen = s.gen.load(std::memory_order_acquire);
        return (gen & 1) && (gen & 0xFFFFFF) == ((h >> 32) & 0xFFFFFF) &&
               s.obj.load(std::memory_order_relaxed) == obj;
    }

    // Whether obj is live in this process.
    bool alive(const T *obj) const {
        const Slot &s = slot(obj->index);
        return (s.gen.load(std::memory_order_acquire) & 1) &&
               s.obj.load(std::memory_order_relaxed) == obj;
    }

    Local &local(const T *obj) { return slot(obj->index).local; }

    // Visits every object live in this process's table (usable or not).
    template <class F>
    void for_each(F &&f) {
        uint32_t n;
        {
            std::lock_guard<Mutex> g(lock_);
            n = next_;
        }
        for_each_unlocked(n, f);
    }
    // The same without the table lock, for the fork child (single-threaded;
    // the lock may have been held by a thread that does not exist there).
    template <class F>
    void for_each_in_child(F &&f) {
        for_each_unlocked(next_, f);
    }

    // The object at index, live or not (for ids kept elsewhere).
    T *at_index(uint32_t index) const {
        const Slot *s = find_slot(index);
        return s ? s->obj.load(std::memory_order_acquire) : nullptr;
    }

    uint32_t live() const { return live_; }

    // Held across fork() so that the child never inherits the lock taken.
    void lock_for_fork() { lock_.lock(); }
    void unlock_after_fork() { lock_.unlock(); }

private:
    template <class F>
    void for_each_unlocked(uint32_t n, F &f) {
        for (uint32_t i = 0; i < n; ++i) {
            Slot &s = slot(i);
            T *obj = s.obj.load(std::memory_order_acquire);
            if (obj && (s.gen.load(std::memory_order_acquire) & 1)) f(obj);
        }
    }

    Slot &slot(uint32_t index) const {
        return chunks_[index >> kChunkBits].load(std::memory_order_acquire)[index & (kChunk - 1)];
    }
    const Slot *find_slot(uint32_t index) const {
        uint32_t c = index >> kChunkBits;
        if (c >= kMaxChunks) return nullptr;
        Slot *chunk = chunks_[c].load(std::memory_order_acquire);
        return chunk ? &chunk[index & (kChunk - 1)] : nullptr;
    }
    // Room for one more slot (lock held).
    bool grow_for_one() {
        if (!free_.empty()) return true;
        uint32_t c = next_ >> kChunkBits;
        if (c >= kMaxChunks) return false;
        if (!chunks_[c].load(std::memory_order_relaxed)) {
            Slot *chunk = new (std::nothrow) Slot[kChunk];
            if (!chunk) return false;
            chunks_[c].store(chunk, std::memory_order_release);
        }
        return true;
    }

    // Objects are recycled by kind: private ones on this process's list,
    // shareable ones on the arena's list for their size.
    T *take_object(bool shareable) {
        T *obj = nullptr;
        if (!shareable) {
            {
                std::lock_guard<Mutex> g(lock_);
                if (!pool_.empty()) {
                    obj = pool_.back();
                    pool_.pop_back();
                }
            }
            if (obj) {
                if constexpr (Recyclable<T>) {
                    obj->lock.lock();
                    obj->recycle();
                    return obj;
                }
                obj->~T();
                obj = new (obj) T();
            } else {
                obj = new (std::nothrow) T();
                if (!obj) return nullptr;
            }
        } else {
            // One block: the object, then its holder set.  Reused only for this
            // kind, so a stale pointer in another process still finds a T.
            void *mem = shared_alloc_kind(kSharedBytes, static_cast<int>(Tag) & 7);
            if (!mem) return nullptr;
            obj = new (mem) T();
            obj->holders = new (static_cast<char *>(mem) + kHoldersAt) Holders();
            if constexpr (HasLock<T>)
                obj->lock.make_robust({&obj->holders->census, holders_alive, obj->holders});
        }
        if constexpr (HasLock<T>) obj->lock.lock();
        return obj;
    }
    void give_back(T *obj) {
        if (!obj->shareable) {
            std::lock_guard<Mutex> g(lock_);
            pool_.push_back(obj);
            return;
        }
        obj->~T();
        shared_free_kind(obj, static_cast<int>(Tag) & 7);
    }

    static constexpr size_t kHoldersAt = (sizeof(T) + 63) & ~size_t(63);
    static constexpr size_t kSharedBytes = kHoldersAt + sizeof(Holders);

    mutable Mutex lock_;
    // Zero pages never touched but for the chunks in use: a forking process (a database's
    // postmaster) then gives each child no copy of a directory it would never read.
    std::atomic<Slot *> *const chunks_ = zeroed_directory<std::atomic<Slot *>>(kMaxChunks);
    std::vector<uint32_t> free_;
    std::vector<T *> pool_;
    uint32_t next_ = 0;
    uint32_t live_ = 0;
};

} // namespace vipl
