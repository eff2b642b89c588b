// A VI's lock as a scope: taking it also catches up with what other holders of a
// shareable VI did, and fails a VI whose last holder died holding it.
#pragma once

#include "core/objects.h"

#include <mutex>

namespace vipl {

// A shareable VI's holder catches up with what other holders did (lock held).
void vi_catch_up(Vi *vi);
// A holder of a shareable VI died holding its lock (the robust lock said so,
// lock held): the VI goes to the Error state for every holder.
void vi_check_poison(Vi *vi);
__attribute__((always_inline)) inline void after_lock(Vi *vi) {
    if (vi->lock.owner_died()) vi_check_poison(vi);
    if (vi->shareable) vi_catch_up(vi);
}

// Holds a VI's lock; a lock inherited from a dead holder fails the VI first.
class ViGuard {
public:
    __attribute__((always_inline)) explicit ViGuard(Vi *vi) : vi_(vi) {
        vi->lock.lock();
        after_lock(vi);
    }
    // Takes over the lock another guard handed on with release().
    ViGuard(Vi *vi, std::adopt_lock_t) : vi_(vi) {}
    __attribute__((always_inline)) ~ViGuard() {
        if (vi_) vi_->lock.unlock();
    }
    // Leaves the lock held when this guard goes, for a later one to adopt.
    void release() { vi_ = nullptr; }
    ViGuard(const ViGuard &) = delete;
    ViGuard &operator=(const ViGuard &) = delete;

private:
    Vi *vi_;
};

} // namespace vipl
