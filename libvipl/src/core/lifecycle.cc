#include "core/lifecycle.h"
#include "core/fds.h"

#include "core/cq.h"
#include "core/notify.h"
#include "core/vi.h"
#include "core/wait.h"
#include "prov/provider.h"

#include <algorithm>
#include <sys/epoll.h>
#include <unistd.h>

namespace vipl {

void vi_connected_locked(Vi *vi) {
    vi->peer_pending = false;
    vi->state.store(VIP_STATE_CONNECTED, std::memory_order_release);
    Cq *scq = vi->sq.cq, *rcq = vi->rq.cq;
    if (scq) cq_watch_fds(scq, vi, true);
    if (rcq && rcq != scq) cq_watch_fds(rcq, vi, true);
    if (vi->user_fd >= 0) {
        pollfd fds[4];
        int n = vi->nic->ops->vi->wait_fds(vi, fds, 4);
        for (int i = 0; i < n; ++i) {
            epoll_event ev{};
            ev.events = EPOLLIN | EPOLLRDHUP;
            epoll_ctl(vi->user_fd, EPOLL_CTL_ADD, fds[i].fd, &ev);
        }
    }
    vi_wait_set_transport(vi);
    notifier_watch_vi(vi, true);
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

VIP_RETURN vi_destroy(Vi *vi, const void *handle, bool force) {
    Nic *nic = vi->nic;
    std::lock_guard<Mutex> ng(nic->lock);
    std::lock_guard<Mutex> g(vi->lock);
    if (!ViTable::still(vi, handle)) return VIP_INVALID_PARAMETER;
    if (!force && (vi->state.load() != VIP_STATE_IDLE || vi->sq.size() || vi->rq.size()))
        return VIP_INVALID_STATE;
    if (vi->state.load() != VIP_STATE_IDLE) vi_disconnect_locked(vi);
    notifier_watch_vi(vi, false);
    if (vi->prov) nic->ops->vi->destroy(vi);
    vi->prov = nullptr;
    Cq *scq = vi->sq.cq, *rcq = vi->rq.cq;
    if (scq) cq_detach(scq, vi);
    if (rcq && rcq != scq) cq_detach(rcq, vi);
    vi->sq = WorkQueue{};
    vi->rq = WorkQueue{};
    if (vi->user_fd >= 0) fd_close(vi->user_fd);
    if (vi->wait_ep >= 0) fd_close(vi->wait_ep);
    vi->wait_ep = -1;
    if (vi->efd >= 0) fd_close(vi->efd);
    vi->user_fd = vi->efd = -1;
    if (Ptag *p = ptags().at_index(vi->ptag_id - 1)) p->users.fetch_sub(1);
    nic->vis.erase(std::remove(nic->vis.begin(), nic->vis.end(), vi), nic->vis.end());
    vis().release(vi);
    return VIP_SUCCESS;
}

VIP_RETURN cq_destroy_checked(Cq *cq, const void *handle, bool force) {
    Nic *nic = cq->nic;
    std::lock_guard<Mutex> ng(nic->lock);
    {
        std::lock_guard<Mutex> g(cq->lock);
        if (!CqTable::still(cq, handle)) return VIP_INVALID_PARAMETER;
        if (!force && !cq->members.empty()) return VIP_INVALID_STATE;
    }
    notifier_watch_cq(cq, false);
    nic->cqs.erase(std::remove(nic->cqs.begin(), nic->cqs.end(), cq), nic->cqs.end());
    cq_destroy(cq);
    return VIP_SUCCESS;
}

void close_nic(Nic *nic, const void *handle) {
    std::vector<Vi *> vis_left;
    std::vector<Cq *> cqs_left;
    {
        std::lock_guard<Mutex> g(nic->lock);
        if (!NicTable::still(nic, handle)) return;
        vis_left = nic->vis;
        cqs_left = nic->cqs;
    }
    for (Vi *vi : vis_left) vi_destroy(vi, ViTable::handle_of(vi), true);
    for (Cq *cq : cqs_left) cq_destroy_checked(cq, CqTable::handle_of(cq), true);
    conns().for_each([&](ConnReq *req) {
        if (req->nic == nic && req->epoch == process_epoch()) {
            nic->ops->nic->conn_free(req);
            conns().release(req);
        }
    });
    ptags().for_each([&](Ptag *p) {
        if (p->nic == nic) ptags().release(p);
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
    nics().release(nic);
}

} // namespace vipl
