// Handle tables: opaque VIPL handles that can be checked, never trusted.
//
// A handle is tag(8) | generation(24) | index(32).  Slots are type-stable:
// their memory is never returned, so a stale or racing lookup reads a live
// object of the right type and fails the generation check instead of
// touching freed memory.  Callers that need the object to stay alive re-check
// the generation under the object's lock.
#pragma once

#include "core/mutex.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <vector>

namespace vipl {

// Process epoch: bumped in the child after fork(), so that handles created
// by the parent are refused there.
uint32_t process_epoch();
// getpid(), cached (glibc makes it a system call).
int self_pid();

enum class HandleTag : uint8_t { nic = 0xA1, ptag = 0xA2, vi = 0xA3, cq = 0xA4, conn = 0xA5 };

struct Object {
    std::atomic<uint32_t> gen{0}; // odd while the slot is live
    uint32_t index = 0;
    uint32_t epoch = 0;
    bool shareable = false; // survives fork (issue: shareable resources)

    bool alive() const { return gen.load(std::memory_order_acquire) & 1; }
};

template <class T, HandleTag Tag>
class HandleTable {
public:
    static constexpr uint32_t kChunkBits = 10;
    static constexpr uint32_t kChunk = 1u << kChunkBits;
    static constexpr uint32_t kMaxChunks = 1u << 14; // 16M objects

    // Returns a live slot (generation made odd) or nullptr when max objects are in use.
    T *alloc(uint32_t max_objects) {
        std::lock_guard<Mutex> g(lock_);
        if (live_ >= max_objects) return nullptr;
        uint32_t index;
        if (!free_.empty()) {
            index = free_.back();
            free_.pop_back();
        } else {
            index = next_;
            uint32_t c = index >> kChunkBits;
            if (c >= kMaxChunks) return nullptr;
            if (!chunks_[c].load(std::memory_order_relaxed)) {
                T *chunk = new (std::nothrow) T[kChunk];
                if (!chunk) return nullptr;
                chunks_[c].store(chunk, std::memory_order_release);
            }
            ++next_;
        }
        T *obj = slot(index);
        obj->index = index;
        obj->epoch = process_epoch();
        obj->shareable = false;
        obj->gen.fetch_add(1, std::memory_order_acq_rel); // even -> odd: live
        ++live_;
        return obj;
    }

    // Makes every handle of obj stale and recycles the slot.
    void release(T *obj) {
        obj->gen.fetch_add(1, std::memory_order_acq_rel); // odd -> even
        std::lock_guard<Mutex> g(lock_);
        free_.push_back(obj->index);
        --live_;
    }

    static void *handle_of(const T *obj) {
        uint64_t gen = obj->gen.load(std::memory_order_relaxed) & 0xFFFFFF;
        uint64_t h = (static_cast<uint64_t>(Tag) << 56) | (gen << 32) | obj->index;
        return reinterpret_cast<void *>(h);
    }

    // The live object a handle names, or nullptr.
    T *lookup(const void *handle) const {
        uint64_t h = reinterpret_cast<uint64_t>(handle);
        if ((h >> 56) != static_cast<uint64_t>(Tag)) return nullptr;
        uint32_t index = static_cast<uint32_t>(h);
        uint32_t c = index >> kChunkBits;
        if (c >= kMaxChunks) return nullptr;
        T *chunk = chunks_[c].load(std::memory_order_acquire);
        if (!chunk) return nullptr;
        T *obj = &chunk[index & (kChunk - 1)];
        uint32_t gen = obj->gen.load(std::memory_order_acquire);
        if (!(gen & 1) || (gen & 0xFFFFFF) != ((h >> 32) & 0xFFFFFF)) return nullptr;
        if (obj->epoch != process_epoch() && !obj->shareable) return nullptr;
        return obj;
    }

    // Whether obj still is the object handle named (call under obj's lock).
    static bool still(const T *obj, const void *handle) {
        uint64_t h = reinterpret_cast<uint64_t>(handle);
        uint32_t gen = obj->gen.load(std::memory_order_acquire);
        return (gen & 1) && (gen & 0xFFFFFF) == ((h >> 32) & 0xFFFFFF);
    }

    // Visits every live object (for shutdown and diagnostics).
    template <class F>
    void for_each(F &&f) {
        uint32_t n;
        {
            std::lock_guard<Mutex> g(lock_);
            n = next_;
        }
        for (uint32_t i = 0; i < n; ++i) {
            T *obj = slot(i);
            if (obj->alive()) f(obj);
        }
    }

    uint32_t live() const { return live_; }

    // The slot at index if it was ever allocated (live or not).
    T *at_index(uint32_t index) const {
        uint32_t c = index >> kChunkBits;
        if (c >= kMaxChunks || !chunks_[c].load(std::memory_order_acquire)) return nullptr;
        return slot(index);
    }

private:
    T *slot(uint32_t index) const {
        return &chunks_[index >> kChunkBits].load(std::memory_order_acquire)[index & (kChunk - 1)];
    }

    Mutex lock_;
    std::atomic<T *> chunks_[kMaxChunks] = {};
    std::vector<uint32_t> free_;
    uint32_t next_ = 0;
    uint32_t live_ = 0;
};

} // namespace vipl
