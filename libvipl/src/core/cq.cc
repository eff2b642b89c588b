#include "core/cq.h"
#include "core/lifecycle.h"
#include "core/wait.h"

#include "core/arena.h"
#include "core/config.h"
#include "core/fds.h"
#include "core/log.h"
#include "core/vi.h"
#include "core/vi_guard.h"
#include "prov/provider.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace vipl {

VIP_RETURN cq_create(Nic *nic, uint32_t entries, bool shareable, Cq **out) {
    Cq *cq = cqs().create(config().max_cq, shareable);
    if (!cq) return VIP_ERROR_RESOURCE;
    std::unique_lock<Mutex> held(cq->lock, std::adopt_lock);
    cq->nic = nic;
    cq->capacity = entries;
    // A shareable CQ's descriptors stay open in the children that share it.
    cq->efd = fd_track(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), shareable);
    cq->epfd = fd_track(epoll_create1(EPOLL_CLOEXEC), shareable);
    cq->ring_cap = std::min<uint32_t>(entries, 64);
    cq->ring = static_cast<CqEntry *>(object_alloc(sizeof(CqEntry) * cq->ring_cap, shareable));
    if (cq->efd < 0 || cq->epfd < 0 || !cq->ring) {
        VIPL_ERROR("cannot create a completion queue: %s", strerror(errno));
        held.unlock();
        cq_destroy(cq);
        return VIP_ERROR_RESOURCE;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;
    epoll_ctl(cq->epfd, EPOLL_CTL_ADD, cq->efd, &ev);
    *out = cq;
    return VIP_SUCCESS;
}

void cq_destroy(Cq *cq) {
    {
        // Under the lock: a waiter that woke as the CQ went away (VipCloseNic
        // on another thread) may still look at it, and must find it empty.
        std::lock_guard<Mutex> g(cq->lock);
        if (cq->ring) object_free(cq->ring, sizeof(CqEntry) * cq->ring_cap, cq->shareable);
        if (cq->members) object_free(cq->members, sizeof(Vi *) * cq->members_cap, cq->shareable);
        cq->ring = nullptr;
        cq->members = nullptr;
        cq->ring_cap = cq->members_cap = cq->nmembers = 0;
        cq->head = cq->tail = 0;
    }
    if (cq->efd >= 0) fd_close(cq->efd);
    if (cq->epfd >= 0) fd_close(cq->epfd);
    cq->efd = cq->epfd = -1;
    cqs().release(cq, true);
}

bool cq_push(Cq *cq, Vi *vi, bool recv) {
    {
        std::lock_guard<Mutex> g(cq->lock);
        uint64_t n = cq->tail - cq->head;
        if (n >= cq->capacity) {
            cq->backlog = true;
            return false;
        }
        if (n >= cq->ring_cap) {
            // Grow lazily: a large CQ costs memory only when it fills.
            uint32_t cap = std::min<uint32_t>(cq->ring_cap * 2, cq->capacity);
            auto *bigger =
                static_cast<CqEntry *>(object_alloc(sizeof(CqEntry) * cap, cq->shareable));
            if (!bigger) {
                cq->backlog = true;
                return false;
            }
            for (uint64_t i = cq->head; i < cq->tail; ++i)
                bigger[i % cap] = cq->ring[i % cq->ring_cap];
            object_free(cq->ring, sizeof(CqEntry) * cq->ring_cap, cq->shareable);
            cq->ring = bigger;
            cq->ring_cap = cap;
        }
        cq->ring[cq->tail % cq->ring_cap] =
            CqEntry{vis().handle_of(vi), recv ? VIP_TRUE : VIP_FALSE};
        ++cq->tail;
    }
    cq_wake(cq);
    return true;
}

bool cq_pop(Cq *cq, CqEntry *out) {
    bool backlog;
    {
        std::lock_guard<Mutex> g(cq->lock);
        if (cq->head == cq->tail || !cq->ring) return false;
        *out = cq->ring[cq->head % cq->ring_cap];
        ++cq->head;
        backlog = cq->backlog;
    }
    if (backlog) cq_drain_backlog(cq);
    return true;
}

void cq_members(Cq *cq, std::vector<Vi *> &out) {
    std::lock_guard<Mutex> g(cq->lock);
    out.assign(cq->members, cq->members + cq->nmembers);
}

void cq_drain_backlog(Cq *cq) {
    {
        std::lock_guard<Mutex> g(cq->lock);
        if (!cq->backlog) return;
        cq->backlog = false;
    }
    std::vector<Vi *> members;
    cq_members(cq, members);
    for (Vi *vi : members) {
        ViGuard g(vi);
        if (!vis().alive(vi)) continue;
        for (WorkQueue *q : {&vi->sq, &vi->rq})
            if (q->cq == cq && q->cq_backlog) {
                q->cq_backlog = false;
                wq_advance(vi, *q);
            }
    }
}

void cq_wake(Cq *cq) {
    bool wanted = cq->sleepers.load(std::memory_order_seq_cst) > 0 ||
                  cq->fd_mode.load(std::memory_order_relaxed) || cq->notify;
    if (!wanted || cq->kicked.exchange(true, std::memory_order_acq_rel)) return;
    eventfd_ring(cq->efd);
}

void cq_drain(Cq *cq) {
    cq->kicked.store(false, std::memory_order_release);
    eventfd_drain(cq->efd);
}

void cq_attach(Cq *cq, Vi *vi) {
    std::lock_guard<Mutex> g(cq->lock);
    for (uint32_t i = 0; i < cq->nmembers; ++i)
        if (cq->members[i] == vi) return;
    if (cq->nmembers == cq->members_cap) {
        uint32_t cap = cq->members_cap ? cq->members_cap * 2 : 8;
        auto *bigger = static_cast<Vi **>(object_alloc(sizeof(Vi *) * cap, cq->shareable));
        if (!bigger) return; // the VI's completions still reach the CQ; only waits miss its fds
        if (cq->members) {
            memcpy(bigger, cq->members, sizeof(Vi *) * cq->nmembers);
            object_free(cq->members, sizeof(Vi *) * cq->members_cap, cq->shareable);
        }
        cq->members = bigger;
        cq->members_cap = cap;
    }
    cq->members[cq->nmembers++] = vi;
    // Edge-triggered: the CQ side never drains a member's doorbell, whose
    // count may be a wake-up for a sleeper on the VI itself (wait.cc).
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    ev.data.u64 = reinterpret_cast<uint64_t>(vis().handle_of(vi));
    epoll_ctl(cq->epfd, EPOLL_CTL_ADD, vi->efd, &ev);
}

void cq_detach(Cq *cq, Vi *vi) {
    std::lock_guard<Mutex> g(cq->lock);
    for (uint32_t i = 0; i < cq->nmembers; ++i)
        if (cq->members[i] == vi) {
            cq->members[i] = cq->members[--cq->nmembers];
            epoll_ctl(cq->epfd, EPOLL_CTL_DEL, vi->efd, nullptr);
            return;
        }
}

void cq_watch_fds(Cq *cq, Vi *vi, bool add) {
    watch_transport(cq->epfd, vi, reinterpret_cast<uint64_t>(vis().handle_of(vi)), add);
}

} // namespace vipl
