// VI and NIC life cycle: connecting, disconnecting, destroying, closing.
#pragma once

#include "core/objects.h"

#include <mutex>

namespace vipl {

// Marks a VI Connected once its provider finished connecting (vi->lock
// held) and starts watching its transport descriptors.
void vi_connected_locked(Vi *vi);
// Every epoll set of this process forgets the VI's transport copies (lock
// held): none keeps watching a descriptor a fork child may still hold open.
void vi_transport_closing(Vi *vi);
// The provider's transport descriptors and mapping, as this process holds
// them (lock held): vi_drop_copies unwatches and closes them, in every
// holder of a shareable VI (each its own copies), when the transport goes
// away.  Providers never close them themselves.
void vi_hold_fd(Vi *vi, int fd);
void vi_hold_map(Vi *vi, void *p, size_t size);
void vi_hold_aux(Vi *vi, void *aux);
void vi_drop_copies(Vi *vi);
// The provider's transport is gone (lock held, copies dropped): the other
// holders drop theirs at their next call.
void vi_transport_gone(Vi *vi);
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

// Drops the VI's connection (vi->lock held): provider disconnect, Idle state,
// outstanding descriptors flushed.
void vi_disconnect_locked(Vi *vi);
// Destroys a VI.  Unless force, the VI must be Idle with empty queues.
VIP_RETURN vi_destroy(Vi *vi, const void *handle, bool force);
VIP_RETURN cq_destroy_checked(Cq *cq, const void *handle, bool force);
// VipCloseNic: destroys everything left on the NIC, then the NIC.
void close_nic(Nic *nic, const void *handle);

} // namespace vipl
