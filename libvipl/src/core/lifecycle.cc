#include "core/lifecycle.h"
#include "core/fds.h"
#include "core/vi_guard.h"

#include "core/clock.h"
#include "core/cq.h"
#include "core/log.h"
#include "core/notify.h"
#include "core/vi.h"
#include "core/wait.h"
#include "prov/provider.h"

#include <algorithm>
#include <mutex>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

namespace vipl {

// Threads inside a wait on an object use its descriptors without its lock:
// they must have left before the descriptors close (or their numbers are
// reused under them).  The object's handles are stale already, so each leaves
// at its next look; its doorbell is rung until all have.  `lock` (held) is
// let go meanwhile: a waiter takes it on its way out.
static void wait_users_gone(std::atomic<int> &users, int efd, Mutex &lock) {
    if (users.load(std::memory_order_seq_cst) == 0) return;
    lock.unlock();
    uint64_t start = now_ns();
    for (unsigned i = 0; users.load(std::memory_order_acquire) > 0; ++i) {
        if ((i & 15) == 0 && efd >= 0) eventfd_ring(efd);
        if (now_ns() - start > 10'000'000'000ull) {
            VIPL_ERROR("a thread did not leave a wait on a destroyed object within 10 s");
            break;
        }
        timespec ts{0, 100'000};
        nanosleep(&ts, nullptr);
    }
    lock.lock();
}

void vi_connected_locked(Vi *vi) {
    vi->peer_pending = false;
    // The connection's descriptors and memory exist in this process only: the
    // VI is shared again with the children forked from now on.
    if (vi->shareable) vi->holders->reset(self_token(), self_pid());
    vi->state.store(VIP_STATE_CONNECTED, std::memory_order_release);
    Cq *scq = vi->sq.cq, *rcq = vi->rq.cq;
    if (scq) cq_watch_fds(scq, vi, true);
    if (rcq && rcq != scq) cq_watch_fds(rcq, vi, true);
    watch_transport(vis().local(vi).user_fd, vi, 0, true);
    vi_wait_set_transport(vi);
    notifier_watch_vi(vi, true);
}

// Every epoll set of this process forgets the VI's transport copies; with
// `shared_sets` false, all but those it shares with the other holders of a
// shareable VI (its CQs' sets, the VipGetViWaitFd set inherited across fork).
static void unwatch_copies(Vi *vi, bool shared_sets) {
    if (!vi->usable_here()) return;
    ViLocal &l = vis().local(vi);
    Cq *scq = vi->sq.cq, *rcq = vi->rq.cq;
    int sets[4] = {l.wait_ep, -1, -1, -1};
    if (shared_sets) {
        sets[1] = l.user_fd;
        sets[2] = scq ? scq->epfd : -1;
        sets[3] = rcq ? rcq->epfd : -1;
    }
    for (int fd : l.copy_fd) {
        if (fd < 0) continue;
        for (int set : sets)
            if (set >= 0) epoll_ctl(set, EPOLL_CTL_DEL, fd, nullptr);
    }
    notifier_forget_fds(vi, l.copy_fd, ViLocal::kMaxCopies);
}

void vi_transport_closing(Vi *vi) {
    unwatch_copies(vi, true);
}

void vi_hold_fd(Vi *vi, int fd) {
    ViLocal &l = vis().local(vi);
    if (l.copies_epoch != vi->transport_epoch) vi_drop_copies(vi);
    l.copies_epoch = vi->transport_epoch;
    for (int &slot : l.copy_fd)
        if (slot < 0) {
            slot = fd;
            if (vi->shareable) fd_share(fd);
            return;
        }
}

void vi_hold_map(Vi *vi, void *p, size_t size) {
    ViLocal &l = vis().local(vi);
    l.copies_epoch = vi->transport_epoch;
    l.copy_map = p;
    l.copy_map_size = size;
}

void vi_hold_aux(Vi *vi, void *aux) {
    vis().local(vi).copy_aux = aux;
}

// Closes this process's copies (already unwatched).
static void close_copies(Vi *vi) {
    ViLocal &l = vis().local(vi);
    for (int &fd : l.copy_fd) {
        if (fd >= 0) fd_close(fd);
        fd = -1;
    }
    if (l.copy_map) munmap(l.copy_map, l.copy_map_size);
    l.copy_map = nullptr;
    l.copy_map_size = 0;
    if (l.copy_aux) vi->nic->ops->vi->drop_aux(vi, l.copy_aux);
    l.copy_aux = nullptr;
}

void vi_drop_copies(Vi *vi) {
    vi_transport_closing(vi);
    close_copies(vi);
}

void vi_transport_gone(Vi *vi) {
    if (vi->shareable) ++vi->transport_epoch;
    vis().local(vi).copies_epoch = vi->transport_epoch;
}

void vi_catch_up(Vi *vi) {
    ViLocal &l = vis().local(vi);
    bool stale = l.copies_epoch != vi->transport_epoch;
    bool missed = l.error_seq != vi->error_seq;
    if (!(stale || missed) || !vis().alive(vi) || !vi->usable_here()) return;
    if (stale) {
        vi_drop_copies(vi);
        l.copies_epoch = vi->transport_epoch;
    }
    if (missed) {
        // Raised by another holder: this one hears it too (its error
        // callback runs if it owns the NIC).
        l.error_seq = vi->error_seq;
        vi_report(vi, vi->error_code);
    }
}

void vi_check_poison(Vi *vi) {
    if (!vi->lock.owner_died()) return;
    vi->lock.clear_owner_died();
    vi->poisoned = true;
    vi->taking = vi->wake_owed = false; // it may have died inside a Done's progress
    VIPL_WARN("a process sharing VI %p died inside the library: the VI fails for every holder",
              vis().handle_of(vi));
    if (vi->prov) vi->nic->ops->vi->abandon(vi);
    vi_fail(vi, VIP_ERROR_CATASTROPHIC);
}

void vi_disconnect_locked(Vi *vi) {
    if (vi->prov) vi->nic->ops->vi->disconnect(vi);
    vi->peer_pending = false;
    vi->state.store(VIP_STATE_IDLE, std::memory_order_release);
    wq_flush(vi, vi->sq, VIP_STATUS_DESC_FLUSHED_ERROR);
    wq_flush(vi, vi->rq, VIP_STATUS_DESC_FLUSHED_ERROR);
    vi->kicked.store(false);
    vi_wake(vi);
}

// Closes what this process has of a VI for itself.
static void close_local(Vi *vi) {
    ViLocal &l = vis().local(vi);
    if (l.user_fd >= 0) fd_close(l.user_fd);
    if (l.wait_ep >= 0) fd_close(l.wait_ep);
    l = ViLocal{};
}

// A holder of a shareable VI leaves while others keep it: it closes its own
// copies of the descriptors and mappings and forgets the handle.
static void vi_leave_locked(Vi *vi) {
    notifier_watch_vi(vi, false);
    vis().retire(vi);
    wait_users_gone(vi->sleepers, vi->efd, vi->lock);
    if (vi->prov) vi->nic->ops->vi->leave(vi);
    // The transport stays open in the holders that stay, and so do the epoll
    // sets we share with them: a set is one kernel object for all its
    // holders, so removing our copy of a descriptor from it would remove
    // theirs (a shareable CQ, an inherited wait fd would never wake again).
    unwatch_copies(vi, false);
    close_copies(vi);
    close_local(vi);
    close(vi->efd); // our copy; the number stays valid for the others
    vi->holders->remove(self_token());
    vis().release(vi, false);
}

VIP_RETURN vi_destroy(Vi *vi, const void *handle, bool force) {
    Nic *nic = vi->nic;
    // A fork child's NIC is a frozen copy of its parent's (its locks may have
    // been held at fork time): only the NIC's own process uses its lock and lists.
    bool own_nic = nic->owner == self_token();
    std::unique_lock<Mutex> ng(nic->lock, std::defer_lock);
    if (own_nic) ng.lock();
    ViGuard g(vi);
    if (!vis().still(vi, handle)) return VIP_INVALID_PARAMETER;
    vi_check_poison(vi);
    if (own_nic) nic->vis.erase(std::remove(nic->vis.begin(), nic->vis.end(), vi), nic->vis.end());
    if (vi->shareable && vi->holders->others_alive(self_token())) {
        vi_leave_locked(vi);
        return VIP_SUCCESS;
    }
    if (!force && (vi->state.load() != VIP_STATE_IDLE || vi->sq.size() || vi->rq.size())) {
        if (own_nic) nic->vis.push_back(vi);
        return VIP_INVALID_STATE;
    }
    if (vi->state.load() != VIP_STATE_IDLE) vi_disconnect_locked(vi);
    notifier_watch_vi(vi, false);
    vis().retire(vi);
    wait_users_gone(vi->sleepers, vi->efd, vi->lock);
    if (vi->prov) nic->ops->vi->destroy(vi);
    vi->prov = nullptr;
    Cq *scq = vi->sq.cq, *rcq = vi->rq.cq;
    if (scq) cq_detach(scq, vi);
    if (rcq && rcq != scq) cq_detach(rcq, vi);
    vi->sq.reset();
    vi->rq.reset();
    close_local(vi);
    if (vi->efd >= 0) fd_close(vi->efd);
    vi->efd = -1;
    if (own_nic)
        if (Ptag *p = ptags().at_index(vi->ptag_id - 1)) p->users.fetch_sub(1);
    vis().release(vi, true);
    return VIP_SUCCESS;
}

VIP_RETURN cq_destroy_checked(Cq *cq, const void *handle, bool force) {
    Nic *nic = cq->nic;
    bool own_nic = nic->owner == self_token(); // see vi_destroy
    std::unique_lock<Mutex> ng(nic->lock, std::defer_lock);
    if (own_nic) ng.lock();
    bool leave;
    {
        std::lock_guard<Mutex> g(cq->lock);
        cq->lock.clear_owner_died(); // a CQ's state stays consistent entry by entry
        if (!cqs().still(cq, handle)) return VIP_INVALID_PARAMETER;
        leave = cq->shareable && cq->holders->others_alive(self_token());
        if (!leave && !force && cq->nmembers) return VIP_INVALID_STATE;
    }
    notifier_watch_cq(cq, false);
    {
        std::lock_guard<Mutex> g(cq->lock);
        cqs().retire(cq);
        wait_users_gone(cq->users, cq->efd, cq->lock);
    }
    if (own_nic) nic->cqs.erase(std::remove(nic->cqs.begin(), nic->cqs.end(), cq), nic->cqs.end());
    if (leave) {
        // Our copies of its descriptors only; the others keep the CQ.
        close(cq->efd);
        close(cq->epfd);
        cq->holders->remove(self_token());
        cqs().release(cq, false);
        return VIP_SUCCESS;
    }
    cq_destroy(cq);
    return VIP_SUCCESS;
}

void close_nic(Nic *nic, const void *handle) {
    std::vector<Vi *> vis_left;
    std::vector<Cq *> cqs_left;
    {
        std::lock_guard<Mutex> g(nic->lock);
        if (!nics().still(nic, handle)) return;
        vis_left = nic->vis;
        cqs_left = nic->cqs;
    }
    for (Vi *vi : vis_left) vi_destroy(vi, vis().handle_of(vi), true);
    for (Cq *cq : cqs_left) cq_destroy_checked(cq, cqs().handle_of(cq), true);
    conns().for_each([&](ConnReq *req) {
        if (req->nic == nic && req->usable_here()) {
            nic->ops->nic->conn_free(req);
            conns().release(req, true);
        }
    });
    ptags().for_each([&](Ptag *p) {
        if (p->nic == nic) ptags().release(p, true);
    });
    std::lock_guard<Mutex> g(nic->lock);
    nic->ops->nic->close(nic);
    nic->prov = nullptr;
    nic->regions.destroy();
    {
        std::lock_guard<Mutex> eg(nic->error_lock);
        nic->error_handler = nullptr;
        nic->errors.clear();
    }
    nics().release(nic, true);
}

} // namespace vipl
