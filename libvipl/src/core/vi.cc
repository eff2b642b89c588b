#include "core/vi.h"

#include "core/arena.h"
#include "core/config.h"
#include "core/cq.h"
#include "core/fds.h"
#include "core/log.h"
#include "core/notify.h"
#include "prov/provider.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace vipl {

// vi_wake for completions made visible: an explicitly armed fd whose peer has rung
// (its arming is used up) is readable already, until the next arming drains it.  The
// fd's wake-up waits while a Done of this process makes them: the caller takes what it
// came for at once, and a program that finds its data needs no readable fd (an eventfd
// write now and a drain at the next arming, two system calls per message on tcp).
// A program armed for arrivals only does not hear of its own sends completing.
static inline void vi_wake_completed(Vi *vi, unsigned kinds) {
    if (vi->sleepers.load(std::memory_order_seq_cst) > 0 || vi->sq.notify || vi->rq.notify) {
        vi_wake_now(vi);
        return;
    }
    if (!fd_wants_wake(vi, kinds) || (vi->fd_explicit.load(std::memory_order_relaxed) && vi->prov &&
                                      !vi->nic->ops->vi->armed(vi)))
        return;
    if (vi->taking)
        vi->wake_owed = true;
    else
        vi_wake_now(vi);
}

void vi_settle_owed_wake(Vi *vi) {
    vi->wake_owed = false;
    // What the Done left behind (the other queue's, a second message) still needs it.
    unsigned left = (vi->rq.head != vi->rq.visible ? kWakeRecv : 0u) |
                    (vi->sq.head != vi->sq.visible ? kWakeSend : 0u);
    if (left) vi_wake_completed(vi, left);
}

bool WorkQueue::grow(uint32_t limit) {
    if (size() >= limit) return false;
    if (ring && size() < cap) return true;
    // Small first: most VIs keep few descriptors outstanding, and a host may
    // hold a hundred thousand of them.
    uint32_t ncap = cap ? cap * 2 : 4;
    auto *bigger = static_cast<WqEntry *>(object_alloc(sizeof(WqEntry) * ncap, shared));
    if (!bigger) return false;
    for (uint64_t i = head; i < tail; ++i) bigger[i & (ncap - 1)] = at(i);
    if (ring) object_free(ring, sizeof(WqEntry) * cap, shared);
    ring = bigger;
    cap = ncap;
    return true;
}

void WorkQueue::reset() {
    if (ring) object_free(ring, sizeof(WqEntry) * cap, shared);
    ring = nullptr;
    cap = 0;
    head = visible = cursor = tail = 0;
    cq_backlog = false;
    notify = nullptr;
    notify_context = nullptr;
}

void wq_complete(Vi *vi, WorkQueue &q, WqEntry &e, uint32_t status, uint32_t length) {
    e.status = status | VIP_STATUS_DONE;
    e.length = length;
    e.flags |= kWqDone;
    wq_advance(vi, q);
}

void wq_advance(Vi *vi, WorkQueue &q) {
    bool recv = is_recv_queue(vi, q);
    uint64_t v = q.visible, first = v;
    for (; v < q.tail; ++v) {
        WqEntry &e = q.at(v);
        if (!(e.flags & kWqDone)) break;
        if (q.cq && !cq_push(q.cq, vi, recv)) {
            q.cq_backlog = true;
            break;
        }
        VIP_CONTROL_SEGMENT &cs = e.desc->CS;
        if (recv || e.op == VIP_CONTROL_OP_RDMAREAD || (e.status & VIP_STATUS_ERROR_MASK))
            cs.Length = e.length;
        if (e.flags & kWqImm) cs.ImmediateData = e.imm;
        // Status last: programs that watch it see the other fields first.
        __atomic_store_n(&cs.Status, e.status, __ATOMIC_RELEASE);
        __atomic_store_n(&q.visible, v + 1, __ATOMIC_RELEASE);
    }
    if (v != first) vi_wake_completed(vi, recv ? kWakeRecv : kWakeSend);
}

void wq_flush(Vi *vi, WorkQueue &q, uint32_t started_status) {
    bool recv = is_recv_queue(vi, q);
    for (uint64_t i = q.visible; i < q.tail; ++i) {
        WqEntry &e = q.at(i);
        if (e.flags & kWqDone) continue;
        uint32_t err = (e.flags & kWqStarted) ? started_status : VIP_STATUS_DESC_FLUSHED_ERROR;
        e.status = VIP_STATUS_DONE | err | status_op_bits(e.op, recv);
        e.length = 0;
        e.flags |= kWqDone;
    }
    q.cursor = q.tail;
    wq_advance(vi, q);
}

void report_error(Nic *nic, const VIP_ERROR_DESCRIPTOR &err) {
    // In a process sharing a VI the NIC is a copy of its parent's: its error
    // handler is the parent's; only the NIC's own process runs it.
    if (nic->owner == self_token() && notifier_post_error(nic, err)) return;
    static const char *const names[] = {"POST_DESC",  "CONN_LOST",      "RECVQ_EMPTY", "VI_OVERRUN",
                                        "RDMAW_PROT", "RDMAW_DATA",     "RDMAW_ABORT", "RDMAR_PROT",
                                        "COMP_PROT",  "RDMA_TRANSPORT", "CATASTROPHIC"};
    unsigned code = static_cast<unsigned>(err.ErrorCode);
    // A peer that disconnects or exits is normal life; everything else deserves a warning.
    LogLevel level = err.ErrorCode == VIP_ERROR_CONN_LOST ? LogLevel::info : LogLevel::warn;
    if (!log_enabled(level)) return;
    log_line(level, "asynchronous error VIP_ERROR_%s on %s %p (no error callback registered)",
             code < 11 ? names[code] : "?", err.ResourceCode == VIP_RESOURCE_CQ ? "CQ" : "VI",
             err.ResourceCode == VIP_RESOURCE_CQ ? err.CQHandle : err.ViHandle);
}

void vi_report(Vi *vi, VIP_ERROR_CODE code, VIP_DESCRIPTOR *desc, uint16_t op) {
    VIP_ERROR_DESCRIPTOR err{};
    err.NicHandle = nics().handle_of(vi->nic);
    err.ViHandle = vis().handle_of(vi);
    err.DescriptorPtr = desc;
    err.OpCode = op;
    err.ResourceCode = desc ? VIP_RESOURCE_DESCRIPTOR : VIP_RESOURCE_VI;
    err.ErrorCode = code;
    report_error(vi->nic, err);
}

void vi_fail(Vi *vi, VIP_ERROR_CODE code, VIP_DESCRIPTOR *desc, uint16_t op) {
    int state = vi->state.load(std::memory_order_relaxed);
    if (state == VIP_STATE_ERROR || state == VIP_STATE_IDLE) return;
    vi->state.store(VIP_STATE_ERROR, std::memory_order_release);
    wq_flush(vi, vi->sq, VIP_STATUS_DESC_FLUSHED_ERROR);
    wq_flush(vi, vi->rq, VIP_STATUS_DESC_FLUSHED_ERROR);
    if (vi->shareable) { // the other holders hear it at their next call
        vi->error_code = code;
        vis().local(vi).error_seq = ++vi->error_seq;
    }
    vi_report(vi, code, desc, op);
    // State changes make the wait fd readable even with nothing completed.
    vi->kicked.store(false, std::memory_order_relaxed);
    vi_wake(vi);
}

void vi_wake_now(Vi *vi) {
    if (vi->kicked.exchange(true, std::memory_order_acq_rel)) return;
    eventfd_ring(vi->efd);
    ++vi->counters.DoorbellsRung;
    for (WorkQueue *q : {&vi->sq, &vi->rq})
        if (q->cq) cq_wake(q->cq);
}

void vi_drain(Vi *vi) {
    vi->kicked.store(false, std::memory_order_release);
    vi->undrained.store(false, std::memory_order_relaxed);
    eventfd_drain(vi->efd);
}

void vi_doorbell_heard(Vi *vi, bool edge) {
    if (!edge) {
        vi_drain(vi);
        return;
    }
    vi->kicked.store(false, std::memory_order_release);
    vi->undrained.store(true, std::memory_order_relaxed);
}

void vi_progress(Vi *vi) {
    if (vi->prov) vi->nic->ops->vi->progress(vi);
}

// ------------------------------------------------------------ descriptors

static inline VIP_DESCRIPTOR_SEGMENT *segment(VIP_DESCRIPTOR *d, uint32_t i) {
    return &d->DS[0] + i;
}

uint32_t parse_descriptor(Vi *vi, VIP_DESCRIPTOR *desc, bool recv, PostedDesc &out, Segment *segs,
                          uint32_t max_segs) {
    const RegionTable &rt = vi->nic->regions;
    const VIP_CONTROL_SEGMENT &cs = desc->CS;
    uint16_t control = cs.Control;
    uint16_t op = control & VIP_CONTROL_OP_MASK;
    out.op = op;
    if ((control & VIP_CONTROL_RESERVED) || op == VIP_CONTROL_OP_RESERVED)
        return VIP_STATUS_FORMAT_ERROR;
    if (recv && op != VIP_CONTROL_OP_SENDRECV) return VIP_STATUS_FORMAT_ERROR;
    uint32_t nseg = cs.SegCount;
    out.nseg = 0;
    out.segs = segs;
    out.length = 0;
    if (nseg > max_segs) return VIP_STATUS_FORMAT_ERROR;
    uint32_t first = 0;
    out.desc = desc;
    out.op = op;
    out.imm = !recv && (control & VIP_CONTROL_IMMEDIATE) && op != VIP_CONTROL_OP_RDMAREAD;
    out.fence = !recv && (control & VIP_CONTROL_QFENCE);
    out.imm_data = cs.ImmediateData;
    out.raddr = 0;
    out.rhandle = 0;
    if (op != VIP_CONTROL_OP_SENDRECV) {
        if (nseg < 1) return VIP_STATUS_FORMAT_ERROR;
        const VIP_ADDRESS_SEGMENT &r = segment(desc, 0)->Remote;
        out.raddr = r.Data.AddressBits;
        out.rhandle = r.Handle;
        first = 1;
    }
    uint64_t total = 0;
    uint32_t n = 0;
    for (uint32_t i = first; i < nseg; ++i) {
        const VIP_DATA_SEGMENT &s = segment(desc, i)->Local;
        if (s.Length == 0) continue;
        if (!rt.covers(s.Handle, vi->ptag_id, s.Data.AddressBits, s.Length, vi->region_flags()))
            return VIP_STATUS_PROTECTION_ERROR;
        segs[n++] = Segment{s.Data.AddressBits, s.Length};
        total += s.Length;
    }
    out.nseg = n;
    out.length = total;
    if (total > vi->attrs.MaxTransferSize) return VIP_STATUS_LENGTH_ERROR;
    if (!recv && total != cs.Length) return VIP_STATUS_FORMAT_ERROR;
    return 0;
}

uint32_t recv_segments(Vi *vi, VIP_DESCRIPTOR *desc, Segment *segs, uint32_t max_segs,
                       uint32_t *nseg, uint64_t *capacity) {
    PostedDesc d;
    uint32_t err = parse_descriptor(vi, desc, true, d, segs, max_segs);
    *nseg = d.nseg;
    *capacity = d.length;
    return err;
}

} // namespace vipl
