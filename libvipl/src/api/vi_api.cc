// VipCreateVi, VipDestroyVi, VipQueryVi, VipSetViAttributes.
#include "api/entry.h"
#include "core/config.h"
#include "core/cq.h"
#include "core/fds.h"
#include "core/lifecycle.h"
#include "core/log.h"
#include "core/vi_guard.h"
#include "prov/provider.h"

#include <cerrno>
#include <cstring>
#include <sys/eventfd.h>
#include <unistd.h>

namespace vipl {

static bool one_bit(unsigned v) {
    return v && !(v & (v - 1));
}

// The checks VipCreateVi and VipSetViAttributes share.
static VIP_RETURN check_attributes(Nic *nic, const VIP_VI_ATTRIBUTES &a, Ptag **ptag) {
    const VIP_NIC_ATTRIBUTES &n = nic->attrs;
    if (!one_bit(a.ReliabilityLevel) || !(a.ReliabilityLevel & n.ReliabilityLevelSupport))
        return VIP_INVALID_RELIABILITY_LEVEL;
    if (a.MaxTransferSize == 0 || a.MaxTransferSize > n.MaxTransferSize) return VIP_INVALID_MTU;
    if (a.QoS) return VIP_INVALID_QOS;
    *ptag = find_ptag(nic, a.Ptag);
    if (!*ptag) return VIP_INVALID_PTAG;
    if (a.EnableRdmaRead && !(a.ReliabilityLevel & n.RDMAReadSupport)) return VIP_INVALID_RDMAREAD;
    return VIP_SUCCESS;
}

extern "C" {

VIP_RETURN VipCreateVi(VIP_NIC_HANDLE NicHandle, VIP_VI_ATTRIBUTES *ViAttribs,
                       VIP_CQ_HANDLE SendCQHandle, VIP_CQ_HANDLE RecvCQHandle,
                       VIP_VI_HANDLE *ViHandle) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic || !ViAttribs || !ViHandle) return VIP_INVALID_PARAMETER;
        Cq *scq = SendCQHandle ? find_cq(SendCQHandle) : nullptr;
        Cq *rcq = RecvCQHandle ? find_cq(RecvCQHandle) : nullptr;
        if ((SendCQHandle && (!scq || scq->nic != nic)) ||
            (RecvCQHandle && (!rcq || rcq->nic != nic)))
            return VIP_INVALID_PARAMETER;
        std::lock_guard<Mutex> g(nic->lock);
        Ptag *ptag;
        VIP_RETURN rc = check_attributes(nic, *ViAttribs, &ptag);
        if (rc != VIP_SUCCESS) return rc;
        if (nic->vis.size() >= nic->attrs.MaxVI) return VIP_ERROR_RESOURCE;
        bool share = ViAttribs->Shareable != VIP_FALSE;
        // Completions of a shareable VI reach its CQs from any holder.
        if ((scq && scq->shareable != share) || (rcq && rcq->shareable != share)) {
            VIPL_INFO("VipCreateVi: a %s VI needs %s CQs", share ? "shareable" : "private",
                      share ? "shareable" : "private");
            return VIP_INVALID_PARAMETER;
        }
        Vi *vi = vis().create(config().max_vi, share);
        if (!vi) return VIP_ERROR_RESOURCE;
        std::unique_lock<Mutex> held(vi->lock, std::adopt_lock);
        if (share) nic->regions.share_with_children();
        vi->nic = nic;
        vi->attrs = *ViAttribs;
        vi->ptag_id = ptag->id();
        vi->sq.shared = vi->rq.shared = share;
        vi->sq.cq = scq;
        vi->rq.cq = rcq;
        vi->efd = fd_track(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), share);
        if (vi->efd < 0) {
            VIPL_ERROR("VipCreateVi: eventfd: %s", strerror(errno));
            held.unlock();
            vis().release(vi, true);
            return VIP_ERROR_RESOURCE;
        }
        rc = nic->ops->vi->create(vi);
        if (rc != VIP_SUCCESS) {
            fd_close(vi->efd);
            vi->efd = -1;
            held.unlock();
            vis().release(vi, true);
            return rc;
        }
        ptag->users.fetch_add(1);
        nic->vis.push_back(vi);
        if (scq) cq_attach(scq, vi);
        if (rcq) cq_attach(rcq, vi);
        *ViHandle = vis().handle_of(vi);
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipDestroyVi(VIP_VI_HANDLE ViHandle) {
    return api_call([&] {
        Vi *vi = find_vi(ViHandle);
        if (!vi) return VIP_INVALID_PARAMETER;
        return vi_destroy(vi, ViHandle, false);
    });
}

VIP_RETURN VipQueryVi(VIP_VI_HANDLE ViHandle, VIP_VI_STATE *State, VIP_VI_ATTRIBUTES *ViAttribs,
                      VIP_BOOLEAN *SendQueueEmpty, VIP_BOOLEAN *RecvQueueEmpty) {
    return locked_vi_call(ViHandle, true, [&](Vi *vi) {
        if (State) *State = static_cast<VIP_VI_STATE>(vi->state.load());
        if (ViAttribs) *ViAttribs = vi->attrs;
        if (SendQueueEmpty) *SendQueueEmpty = vi->sq.size() == 0;
        if (RecvQueueEmpty) *RecvQueueEmpty = vi->rq.size() == 0;
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipSetViAttributes(VIP_VI_HANDLE ViHandle, VIP_VI_ATTRIBUTES *ViAttribs) {
    return api_call([&] {
        Vi *vi = find_vi(ViHandle);
        if (!vi || !ViAttribs) return VIP_INVALID_PARAMETER;
        Nic *nic = vi->nic;
        std::lock_guard<Mutex> ng(nic->lock);
        ViGuard g(vi);
        if (!vis().still(vi, ViHandle)) return VIP_INVALID_PARAMETER;
        if (vi->state.load() != VIP_STATE_IDLE) return VIP_INVALID_STATE;
        Ptag *ptag;
        VIP_RETURN rc = check_attributes(nic, *ViAttribs, &ptag);
        if (rc != VIP_SUCCESS) return rc;
        if (ptag->id() != vi->ptag_id) {
            ptag->users.fetch_add(1);
            if (Ptag *old = ptags().at_index(vi->ptag_id - 1)) old->users.fetch_sub(1);
        }
        vi->attrs = *ViAttribs;
        vi->ptag_id = ptag->id();
        return VIP_SUCCESS;
    });
}

} // extern "C"
} // namespace vipl
