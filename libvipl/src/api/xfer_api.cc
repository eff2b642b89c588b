// Posting descriptors and taking completions.
#include "api/entry.h"
#include "core/clock.h"
#include "core/lifecycle.h"
#include "core/notify.h"
#include "core/vi.h"
#include "core/vi_guard.h"
#include "core/wait.h"
#include "prov/provider.h"

#include <algorithm>

namespace vipl {

// Checks what can be checked before taking the VI's lock: the descriptor must
// be readable, inside MemoryHandle's region of the VI's ptag.
static VIP_RETURN check_location(Vi *vi, VIP_DESCRIPTOR *d, VIP_MEM_HANDLE mh) {
    uint64_t a = reinterpret_cast<uint64_t>(d);
    if (!d || (a & (VIP_DESCRIPTOR_ALIGNMENT - 1))) return VIP_INVALID_PARAMETER;
    const RegionTable &rt = vi->nic->regions;
    if (!rt.covers(mh, vi->ptag_id, a, sizeof(VIP_DESCRIPTOR), vi->region_flags()))
        return VIP_INVALID_PARAMETER;
    uint32_t nseg = d->CS.SegCount;
    if (nseg > 2 && nseg <= vi->nic->attrs.MaxSegmentsPerDesc &&
        !rt.covers(mh, vi->ptag_id, a, sizeof(VIP_CONTROL_SEGMENT) + 16ull * nseg,
                   vi->region_flags()))
        return VIP_INVALID_PARAMETER;
    return VIP_SUCCESS;
}

static void record_regions(WqEntry &e, const VIP_DESCRIPTOR *d, VIP_MEM_HANDLE mh, uint16_t op) {
    e.regions[0] = region_index(mh);
    e.regions[1] = e.regions[2] = ~0u;
    uint32_t first = op == VIP_CONTROL_OP_SENDRECV ? 0 : 1;
    uint32_t n = d->CS.SegCount;
    uint32_t k = 1;
    for (uint32_t i = first; i < n && k < 3; ++i, ++k)
        e.regions[k] = region_index((&d->DS[0] + i)->Local.Handle);
    e.more_segments = n > first + 2 ? n - first - 2 : 0;
}

static VIP_RETURN post(VIP_VI_HANDLE h, VIP_DESCRIPTOR *d, VIP_MEM_HANDLE mh, bool recv) {
    Vi *vi = find_vi(h);
    if (!vi) return VIP_INVALID_PARAMETER;
    VIP_RETURN rc = check_location(vi, d, mh);
    if (rc != VIP_SUCCESS) return rc;
    SegmentBuffer segs(segment_room(vi, d));
    ViGuard g(vi);
    if (!vis().still(vi, h)) return VIP_INVALID_PARAMETER;
    int state = vi->state.load(std::memory_order_relaxed);
    if (recv ? state == VIP_STATE_ERROR : state != VIP_STATE_CONNECTED) return VIP_INVALID_STATE;
    PostedDesc pd;
    uint32_t err = parse_descriptor(vi, d, recv, pd, segs.get(), segs.capacity());
    if (err) {
        __atomic_store_n(&d->CS.Status, VIP_STATUS_DONE | err | status_op_bits(pd.op, recv),
                         __ATOMIC_RELEASE);
        return VIP_DESCRIPTOR_ERROR;
    }
    WorkQueue &q = recv ? vi->rq : vi->sq;
    uint32_t limit = static_cast<uint32_t>(vi->nic->attrs.MaxDescriptorsPerQueue);
    if (q.size() >= limit || (q.size() >= q.cap && !q.grow(limit))) return VIP_ERROR_RESOURCE;
    d->CS.Status = 0;
    WqEntry &e = q.at(q.tail);
    e.desc = d;
    e.status = 0;
    e.length = 0;
    e.imm = 0;
    e.flags = 0;
    e.op = pd.op;
    e.p0 = e.p1 = e.p2 = 0;
    record_regions(e, d, mh, pd.op);
    if (recv) {
        e.capacity = pd.length;
        e.nseg = pd.nseg <= 2 ? pd.nseg : kNotCached;
        for (uint32_t i = 0; i < pd.nseg && i < 2; ++i)
            e.seg[i] = {pd.segs[i].addr, pd.segs[i].len};
    }
    ++q.tail;
    const ViOps *ops = vi->nic->ops->vi;
    if (recv) {
        if (vi->prov) ops->post_recv(vi, &e);
        return VIP_SUCCESS;
    }
    ++vi->counters.SendsPosted;
    vi->counters.BytesSent += pd.length;
    return ops->post_send(vi, &e, pd);
}

// The most one inline send may carry (the VI's lock held): none without a connection.
static uint32_t inline_max_locked(Vi *vi) {
    if (!vi->prov || !vi->nic->ops->vi->inline_max) return 0;
    uint64_t m = vi->nic->ops->vi->inline_max(vi);
    return static_cast<uint32_t>(std::min<uint64_t>(m, vi->attrs.MaxTransferSize));
}

static VIP_RETURN post_inline(VIP_VI_HANDLE h, const VIP_INLINE_SEGMENT *in, VIP_ULONG n) {
    Vi *vi = find_vi(h);
    if (!vi || !in || n == 0 || n > VIP_MAX_INLINE_SEGMENTS) return VIP_INVALID_PARAMETER;
    // The caller's memory, read once: a length another thread changes meanwhile cannot
    // make the copy longer than what was checked.
    Segment segs[VIP_MAX_INLINE_SEGMENTS];
    uint64_t len = 0;
    for (VIP_ULONG i = 0; i < n; ++i) {
        segs[i] = {reinterpret_cast<uint64_t>(in[i].Data), in[i].Length};
        if (segs[i].len && !segs[i].addr) return VIP_INVALID_PARAMETER;
        len += segs[i].len;
    }
    ViGuard g(vi);
    if (!vis().still(vi, h)) return VIP_INVALID_PARAMETER;
    if (vi->state.load(std::memory_order_relaxed) != VIP_STATE_CONNECTED) return VIP_INVALID_STATE;
    if (len > inline_max_locked(vi)) return VIP_INVALID_PARAMETER;
    VIP_RETURN rc = vi->nic->ops->vi->post_inline(vi, segs, static_cast<uint32_t>(n), len);
    if (rc == VIP_SUCCESS) {
        ++vi->counters.SendsPosted;
        ++vi->counters.InlineSends;
        vi->counters.BytesSent += len;
    }
    return rc;
}

static VIP_RETURN set_notify(VIP_VI_HANDLE h, VIP_PVOID ctx,
                             void (*fn)(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *),
                             bool recv) {
    Vi *vi = find_vi(h);
    if (!vi || !fn) return VIP_INVALID_PARAMETER;
    VIP_RETURN rc = notifier_start();
    if (rc != VIP_SUCCESS) return rc;
    ViGuard g(vi);
    if (!vis().still(vi, h)) return VIP_INVALID_PARAMETER;
    WorkQueue &q = recv ? vi->rq : vi->sq;
    q.notify = fn;
    q.notify_context = ctx;
    notifier_watch_vi(vi, true);
    return VIP_SUCCESS;
}

extern "C" {

VIP_RETURN VipPostSend(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR *DescriptorPtr,
                       VIP_MEM_HANDLE MemoryHandle) {
    return api_call([&] { return post(ViHandle, DescriptorPtr, MemoryHandle, false); });
}

VIP_RETURN VipPostRecv(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR *DescriptorPtr,
                       VIP_MEM_HANDLE MemoryHandle) {
    return api_call([&] { return post(ViHandle, DescriptorPtr, MemoryHandle, true); });
}

VIP_RETURN VipPostSendInline(VIP_VI_HANDLE ViHandle, const VIP_INLINE_SEGMENT *Segments,
                             VIP_ULONG SegCount) {
    return api_call([&] { return post_inline(ViHandle, Segments, SegCount); });
}

VIP_RETURN VipQueryViInline(VIP_VI_HANDLE ViHandle, VIP_UINT32 *MaxBytes) {
    return locked_vi_call(ViHandle, MaxBytes != nullptr, [&](Vi *vi) {
        *MaxBytes = inline_max_locked(vi);
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipSendDone(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR **DescriptorPtr) {
    return api_call([&] {
        Vi *vi = find_vi(ViHandle);
        if (!vi || !DescriptorPtr) return VIP_INVALID_PARAMETER;
        return vi_done(vi, ViHandle, false, DescriptorPtr);
    });
}

VIP_RETURN VipRecvDone(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR **DescriptorPtr) {
    return api_call([&] {
        Vi *vi = find_vi(ViHandle);
        if (!vi || !DescriptorPtr) return VIP_INVALID_PARAMETER;
        return vi_done(vi, ViHandle, true, DescriptorPtr);
    });
}

VIP_RETURN VipSendWait(VIP_VI_HANDLE ViHandle, VIP_ULONG Timeout, VIP_DESCRIPTOR **DescriptorPtr) {
    return api_call([&] {
        Vi *vi = find_vi(ViHandle);
        if (!vi || !DescriptorPtr) return VIP_INVALID_PARAMETER;
        return vi_wait(vi, ViHandle, false, deadline_after_ms(Timeout), DescriptorPtr);
    });
}

VIP_RETURN VipRecvWait(VIP_VI_HANDLE ViHandle, VIP_ULONG Timeout, VIP_DESCRIPTOR **DescriptorPtr) {
    return api_call([&] {
        Vi *vi = find_vi(ViHandle);
        if (!vi || !DescriptorPtr) return VIP_INVALID_PARAMETER;
        return vi_wait(vi, ViHandle, true, deadline_after_ms(Timeout), DescriptorPtr);
    });
}

VIP_RETURN VipSendNotify(VIP_VI_HANDLE ViHandle, VIP_PVOID Context,
                         void (*Handler)(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE,
                                         VIP_DESCRIPTOR *)) {
    return api_call([&] { return set_notify(ViHandle, Context, Handler, false); });
}

VIP_RETURN VipRecvNotify(VIP_VI_HANDLE ViHandle, VIP_PVOID Context,
                         void (*Handler)(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE,
                                         VIP_DESCRIPTOR *)) {
    return api_call([&] { return set_notify(ViHandle, Context, Handler, true); });
}

} // extern "C"
} // namespace vipl
