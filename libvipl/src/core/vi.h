// Work-queue and VI-state services of the core, used by the API layer and by
// providers (which call them with vi->lock held).
#pragma once

#include "core/objects.h"
#include "core/posted.h"

#include <memory>

namespace vipl {

// ------------------------------------------------------------ completions

// Records the completion of entry e; written back to the descriptor (and
// reported to the CQ) once every earlier entry of the queue has completed.
void wq_complete(Vi *vi, WorkQueue &q, WqEntry &e, uint32_t status, uint32_t length);
// Writes back completed entries at the front of the queue.
void wq_advance(Vi *vi, WorkQueue &q);
// Completes every outstanding entry of q with an error: `started_status` for
// entries the transport had begun, VIP_STATUS_DESC_FLUSHED_ERROR for the rest.
void wq_flush(Vi *vi, WorkQueue &q, uint32_t started_status);
inline bool is_recv_queue(const Vi *vi, const WorkQueue &q) {
    return &q == &vi->rq;
}

// ------------------------------------------------------------ VI state

// Breaks the connection: the VI goes to the Error state, both queues are
// flushed and the error is reported (error callback or log).
void vi_fail(Vi *vi, VIP_ERROR_CODE code, VIP_DESCRIPTOR *desc = nullptr, uint16_t op = 0);
// Reports an asynchronous error without changing the VI's state.
void vi_report(Vi *vi, VIP_ERROR_CODE code, VIP_DESCRIPTOR *desc = nullptr, uint16_t op = 0);
void report_error(Nic *nic, const VIP_ERROR_DESCRIPTOR &err);

// Wakes whoever waits on the VI (a local thread, the notification thread, a
// program polling its wait fd).  Cheap when nobody does.
void vi_wake_now(Vi *vi);
// Whether a program polling the VI's wait fd must hear of an event of `kinds` (WakeFor)
// now: always in the usual mode, once armed for them in the explicit one
// (VipArmViWaitFdEx).
inline bool fd_wants_wake(const Vi *vi, unsigned kinds = kWakeAny) {
    return vi->fd_mode.load(std::memory_order_relaxed) &&
           (!vi->fd_explicit.load(std::memory_order_relaxed) ||
            (vi->fd_armed.load(std::memory_order_relaxed) & kinds));
}
inline void vi_wake(Vi *vi) {
    if (vi->sleepers.load(std::memory_order_seq_cst) > 0 || fd_wants_wake(vi) || vi->sq.notify ||
        vi->rq.notify)
        vi_wake_now(vi);
}
// Ends a Done's deferral of the wait fd's wake-up (Vi::taking): wakes it if completions
// are left that nobody took.
void vi_settle_owed_wake(Vi *vi);
inline void vi_end_taking(Vi *vi) {
    vi->taking = false;
    if (vi->wake_owed) vi_settle_owed_wake(vi);
}
// Drains vi->efd after a wake-up.
void vi_drain(Vi *vi);
// A sleeper woke on vi->efd: a level-triggered one drains it; an edge-triggered one
// (epoll, EPOLLET) leaves the count, one system call less, for the next arming to drain.
void vi_doorbell_heard(Vi *vi, bool edge);

// Runs the provider's progress if the VI has a transport (lock held).
void vi_progress(Vi *vi);

// Parses and checks a descriptor posted on vi.  On a format, protection or
// length problem returns the VIP_STATUS_* error bit; 0 when good.
uint32_t parse_descriptor(Vi *vi, VIP_DESCRIPTOR *desc, bool recv, PostedDesc &out, Segment *segs,
                          uint32_t max_segs);
// Checks that the segments of a posted receive descriptor are still good and
// copies them to segs; returns a VIP_STATUS_* error bit or 0.
uint32_t recv_segments(Vi *vi, VIP_DESCRIPTOR *desc, Segment *segs, uint32_t max_segs,
                       uint32_t *nseg, uint64_t *capacity);

// Status word op bits for a descriptor op.
inline uint32_t status_op_bits(uint16_t op, bool recv) {
    if (recv) return VIP_STATUS_OP_RECEIVE;
    if (op == VIP_CONTROL_OP_RDMAWRITE) return VIP_STATUS_OP_RDMA_WRITE;
    if (op == VIP_CONTROL_OP_RDMAREAD) return VIP_STATUS_OP_RDMA_READ;
    return VIP_STATUS_OP_SEND;
}

// Room for a descriptor's segments: inline for the usual few, on the heap
// beyond (a 4 KiB array on every post costs stack probes).
class SegmentBuffer {
public:
    explicit SegmentBuffer(uint32_t n)
        : capacity_(n), p_(n <= kInline ? inline_ : (big_ = std::make_unique<Segment[]>(n)).get()) {
    }
    Segment *get() { return p_; }
    uint32_t capacity() const { return capacity_; }

private:
    static constexpr uint32_t kInline = 4;
    uint32_t capacity_;
    Segment inline_[kInline];
    std::unique_ptr<Segment[]> big_;
    Segment *p_;
};
// Segments a descriptor may need: its SegCount, bounded by the NIC's limit.
inline uint32_t segment_room(const Vi *vi, const VIP_DESCRIPTOR *d) {
    uint32_t n = d->CS.SegCount, max = static_cast<uint32_t>(vi->nic->attrs.MaxSegmentsPerDesc);
    return n < max ? n : max;
}

} // namespace vipl
