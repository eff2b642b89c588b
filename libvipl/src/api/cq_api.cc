// Completion queues.
#include "api/entry.h"
#include "core/clock.h"
#include "core/cq.h"
#include "core/lifecycle.h"
#include "core/notify.h"
#include "core/wait.h"

namespace vipl {
extern "C" {

VIP_RETURN VipCreateCQ(VIP_NIC_HANDLE NicHandle, VIP_ULONG EntryCount, VIP_CQ_HANDLE *CQHandle) {
    return VipCreateCQEx(NicHandle, EntryCount, 0, CQHandle);
}

VIP_RETURN VipCreateCQEx(VIP_NIC_HANDLE NicHandle, VIP_ULONG EntryCount, VIP_ULONG Flags,
                         VIP_CQ_HANDLE *CQHandle) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic || !CQHandle || EntryCount == 0 || EntryCount > nic->attrs.MaxCQEntries ||
            (Flags & ~VIP_ULONG(VIP_CQ_SHAREABLE)))
            return VIP_INVALID_PARAMETER;
        std::lock_guard<Mutex> g(nic->lock);
        if (nic->cqs.size() >= nic->attrs.MaxCQ) return VIP_ERROR_RESOURCE;
        Cq *cq;
        VIP_RETURN rc =
            cq_create(nic, static_cast<uint32_t>(EntryCount), Flags & VIP_CQ_SHAREABLE, &cq);
        if (rc != VIP_SUCCESS) return rc;
        nic->cqs.push_back(cq);
        *CQHandle = cqs().handle_of(cq);
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipDestroyCQ(VIP_CQ_HANDLE CQHandle) {
    return api_call([&] {
        Cq *cq = find_cq(CQHandle);
        if (!cq) return VIP_INVALID_PARAMETER;
        return cq_destroy_checked(cq, CQHandle, false);
    });
}

VIP_RETURN VipResizeCQ(VIP_CQ_HANDLE CQHandle, VIP_ULONG EntryCount) {
    return api_call([&] {
        Cq *cq = find_cq(CQHandle);
        if (!cq || EntryCount == 0 || EntryCount > cq->nic->attrs.MaxCQEntries)
            return VIP_INVALID_PARAMETER;
        {
            std::lock_guard<Mutex> g(cq->lock);
            if (!cqs().still(cq, CQHandle)) return VIP_INVALID_PARAMETER;
            if (cq->tail - cq->head > EntryCount) return VIP_INVALID_STATE;
            cq->capacity = static_cast<uint32_t>(EntryCount);
        }
        cq_drain_backlog(cq);
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipCQDone(VIP_CQ_HANDLE CQHandle, VIP_VI_HANDLE *ViHandle, VIP_BOOLEAN *RecvQueue) {
    return api_call([&] {
        Cq *cq = find_cq(CQHandle);
        if (!cq || !ViHandle || !RecvQueue) return VIP_INVALID_PARAMETER;
        return cq_done(cq, CQHandle, ViHandle, RecvQueue);
    });
}

VIP_RETURN VipCQWait(VIP_CQ_HANDLE CQHandle, VIP_ULONG Timeout, VIP_VI_HANDLE *ViHandle,
                     VIP_BOOLEAN *RecvQueue) {
    return api_call([&] {
        Cq *cq = find_cq(CQHandle);
        if (!cq || !ViHandle || !RecvQueue) return VIP_INVALID_PARAMETER;
        return cq_wait(cq, CQHandle, deadline_after_ms(Timeout), ViHandle, RecvQueue);
    });
}

VIP_RETURN VipCQNotify(VIP_CQ_HANDLE CQHandle, VIP_PVOID Context,
                       void (*Handler)(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN)) {
    return api_call([&] {
        Cq *cq = find_cq(CQHandle);
        if (!cq || !Handler) return VIP_INVALID_PARAMETER;
        VIP_RETURN rc = notifier_start();
        if (rc != VIP_SUCCESS) return rc;
        {
            std::lock_guard<Mutex> g(cq->lock);
            if (!cqs().still(cq, CQHandle)) return VIP_INVALID_PARAMETER;
            cq->notify = Handler;
            cq->notify_context = Context;
        }
        notifier_watch_cq(cq, true);
        return VIP_SUCCESS;
    });
}

} // extern "C"
} // namespace vipl
