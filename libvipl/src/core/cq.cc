#include "core/cq.h"
#include "core/fds.h"

#include "core/config.h"
#include "core/log.h"
#include "core/vi.h"
#include "prov/provider.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace vipl {

VIP_RETURN cq_create(Nic *nic, uint32_t entries, Cq **out) {
    Cq *cq = cqs().alloc(config().max_cq);
    if (!cq) return VIP_ERROR_RESOURCE;
    cq->nic = nic;
    cq->capacity = entries;
    cq->head = cq->tail = 0;
    cq->members.clear();
    cq->backlogged.clear();
    cq->snapshot = std::make_shared<const std::vector<Vi *>>();
    cq->notify = nullptr;
    cq->sleepers = 0;
    cq->kicked = false;
    cq->fd_mode = false;
    cq->efd = fd_track(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    cq->epfd = fd_track(epoll_create1(EPOLL_CLOEXEC));
    try {
        cq->ring.assign(std::min<uint32_t>(entries, 1024), CqEntry{});
    } catch (...) {
        cq->ring.clear();
    }
    if (cq->efd < 0 || cq->epfd < 0 || cq->ring.empty()) {
        VIPL_ERROR("cannot create a completion queue: %s", strerror(errno));
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
    if (cq->efd >= 0) fd_close(cq->efd);
    if (cq->epfd >= 0) fd_close(cq->epfd);
    cq->efd = cq->epfd = -1;
    std::vector<CqEntry>().swap(cq->ring);
    cq->snapshot.reset();
    cqs().release(cq);
}

bool cq_push(Cq *cq, Vi *vi, bool recv) {
    {
        std::lock_guard<Mutex> g(cq->lock);
        uint64_t n = cq->tail - cq->head;
        if (n >= cq->capacity) {
            if (std::find(cq->backlogged.begin(), cq->backlogged.end(), vi) == cq->backlogged.end())
                cq->backlogged.push_back(vi);
            return false;
        }
        if (n >= cq->ring.size()) {
            // Grow lazily: a large CQ costs memory only when it fills.
            size_t cap = std::min<size_t>(cq->ring.size() * 2, cq->capacity);
            std::vector<CqEntry> bigger(cap);
            for (uint64_t i = cq->head; i < cq->tail; ++i)
                bigger[i % cap] = cq->ring[i % cq->ring.size()];
            cq->ring.swap(bigger);
        }
        cq->ring[cq->tail % cq->ring.size()] =
            CqEntry{ViTable::handle_of(vi), recv ? VIP_TRUE : VIP_FALSE};
        ++cq->tail;
    }
    cq_wake(cq);
    return true;
}

bool cq_pop(Cq *cq, CqEntry *out) {
    bool backlog;
    {
        std::lock_guard<Mutex> g(cq->lock);
        if (cq->head == cq->tail) return false;
        *out = cq->ring[cq->head % cq->ring.size()];
        ++cq->head;
        backlog = !cq->backlogged.empty();
    }
    if (backlog) cq_drain_backlog(cq);
    return true;
}

void cq_drain_backlog(Cq *cq) {
    std::vector<Vi *> waiting;
    {
        std::lock_guard<Mutex> g(cq->lock);
        waiting.swap(cq->backlogged);
    }
    for (Vi *vi : waiting) {
        std::lock_guard<Mutex> g(vi->lock);
        if (!vi->alive()) continue;
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
    uint64_t one = 1;
    int saved = errno;
    ssize_t n = write(cq->efd, &one, sizeof one);
    (void)n;
    errno = saved;
}

void cq_drain(Cq *cq) {
    cq->kicked.store(false, std::memory_order_release);
    uint64_t v;
    int saved = errno;
    ssize_t n = read(cq->efd, &v, sizeof v);
    (void)n;
    errno = saved;
}

static void publish_members(Cq *cq) {
    cq->snapshot = std::make_shared<const std::vector<Vi *>>(cq->members);
}

void cq_attach(Cq *cq, Vi *vi) {
    std::lock_guard<Mutex> g(cq->lock);
    if (std::find(cq->members.begin(), cq->members.end(), vi) != cq->members.end()) return;
    cq->members.push_back(vi);
    publish_members(cq);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = reinterpret_cast<uint64_t>(ViTable::handle_of(vi));
    epoll_ctl(cq->epfd, EPOLL_CTL_ADD, vi->efd, &ev);
}

void cq_detach(Cq *cq, Vi *vi) {
    std::lock_guard<Mutex> g(cq->lock);
    auto it = std::find(cq->members.begin(), cq->members.end(), vi);
    if (it == cq->members.end()) return;
    cq->members.erase(it);
    cq->backlogged.erase(std::remove(cq->backlogged.begin(), cq->backlogged.end(), vi),
                         cq->backlogged.end());
    publish_members(cq);
    epoll_ctl(cq->epfd, EPOLL_CTL_DEL, vi->efd, nullptr);
}

void cq_watch_fds(Cq *cq, Vi *vi, bool add) {
    pollfd fds[4];
    int n = vi->nic->ops->vi->wait_fds(vi, fds, 4);
    for (int i = 0; i < n; ++i) {
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP;
        ev.data.u64 = reinterpret_cast<uint64_t>(ViTable::handle_of(vi));
        epoll_ctl(cq->epfd, add ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, fds[i].fd, add ? &ev : nullptr);
    }
}

} // namespace vipl
