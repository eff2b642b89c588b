// Receiving: the receiver's progress consumes the in ring, completes receive
// descriptors, serves RDMA through the ring and notices a peer that is gone.
#include "core/config.h"
#include "core/segments.h"
#include "core/vi.h"
#include "prov/shm/shm.h"

#include <cstring>

namespace vipl::shm {
namespace {

enum class Step { next, stall, failed };

bool reliable(const Endpoint *ep) {
    return ep->reliability != VIP_SERVICE_UNRELIABLE;
}

// The peer owns the ring's contents: every field of a record (and of its body) is
// read once, into the Rec and the body copies below, and bounded there; payload
// bytes are copied out as they are (torn payload is the peer's own data), from
// inside the record, which lies inside the ring.

// Size of the record at pos, or 0 if it is malformed.  `nseg`: a SEND-GET's
// segment count, as read once.
uint64_t record_size(const Endpoint *ep, const Rec &r, uint64_t pos, uint32_t *nseg) {
    uint64_t off = pos & ep->mask;
    uint64_t size;
    switch (r.type) {
    case kPad:
        size = ep->ring_size - off;
        break;
    case kSend:
        size = round_line(sizeof(RecHdr) + uint64_t(r.len));
        break;
    case kSendGet: {
        if (off + sizeof(RecHdr) + sizeof(SendGetBody) > ep->ring_size) return 0;
        *nseg = load_once<SendGetBody>(ep->in + off + sizeof(RecHdr)).nseg;
        if (*nseg == 0 || *nseg > 256) return 0;
        size = round_line(sizeof(RecHdr) + sizeof(SendGetBody) + sizeof(Segment) * uint64_t(*nseg));
        break;
    }
    case kSendFrag:
    case kRdmaWriteFrag:
        size = round_line(sizeof(RecHdr) + sizeof(FragBody) + uint64_t(r.len));
        break;
    case kRdmaReadResp:
        size = round_line(sizeof(RecHdr) + sizeof(ReadRespBody) + uint64_t(r.len));
        break;
    case kRdmaReadReq:
        size = round_line(sizeof(RecHdr) + sizeof(ReadReqBody));
        break;
    case kRdmaWriteImm:
    case kError:
        size = kLine;
        break;
    default:
        return 0;
    }
    return (size && off + size <= ep->ring_size) ? size : 0;
}

// A receive-side error on a message: reliable levels break the connection.
Step refuse_message(Vi *vi, Endpoint *ep, uint64_t pos, VIP_DESCRIPTOR *desc) {
    if (!reliable(ep)) return Step::next;
    break_connection(vi, ep, VIP_ERROR_POST_DESC, VIP_ERROR_CONN_LOST, pos, desc);
    return Step::failed;
}

// Where a piece of a fragmented message belongs: pieces come in order, each with the
// first one's total, the first at offset 0 (no other message under way) and the last
// ending at the total.  Anything else is a broken (or hostile) peer.
bool fragment_in_order(Endpoint *ep, bool first, bool last, uint32_t offset, uint32_t total,
                       uint32_t len) {
    if (uint64_t(offset) + len > total) return false;
    if (first) {
        if (ep->frag != Endpoint::Frag::none || offset != 0) return false;
        ep->frag_total = total;
    } else if (offset != ep->frag_next || total != ep->frag_total) {
        return false;
    }
    if (last && offset + len != total) return false;
    ep->frag_next = offset + len;
    return true;
}

// Messages that consume a receive descriptor: sends, their fragments, RDMA writes with
// immediate data.  `body`: the bytes after the record header, inside the ring.
Step deliver(Vi *vi, Endpoint *ep, const Rec &r, const uint8_t *body, uint32_t nseg_remote,
             uint64_t pos) {
    WorkQueue &q = vi->rq;
    bool frag = r.type == kSendFrag || r.type == kRdmaWriteFrag;
    bool first = !frag || (r.flags & kRecFirst);
    bool last = !frag || (r.flags & kRecLast);
    uint64_t total = r.len;
    uint64_t offset = 0;
    const uint8_t *payload = body;
    // A sender finishes a fragmented message before it starts another (only RDMA read
    // answers and pads come in between, which take no receive descriptor).
    if (!frag && ep->frag != Endpoint::Frag::none) return Step::failed;
    if (frag) {
        FragBody b = load_once<FragBody>(body);
        if (r.type == kSendFrag && !fragment_in_order(ep, first, last, b.offset, b.total, r.len))
            return Step::failed;
        total = b.total;
        offset = b.offset;
        payload = body + sizeof(FragBody);
    }
    // Nothing the peer may send is longer than the VI's MaxTransferSize (the two ends
    // agreed on it): a longer message is a broken protocol, not a short buffer.
    if (total > vi->attrs.MaxTransferSize) return Step::failed;
    if (!first && ep->frag == Endpoint::Frag::dropping) {
        if (last) ep->frag = Endpoint::Frag::none;
        return Step::next;
    }
    if (!first && ep->frag != Endpoint::Frag::filling) return Step::failed; // out of sequence
    if (q.cursor == q.tail) {
        if (!reliable(ep)) {
            ep->frag = last ? Endpoint::Frag::none : Endpoint::Frag::dropping;
            return Step::next;
        }
        break_connection(vi, ep, VIP_ERROR_RECVQ_EMPTY, VIP_ERROR_CONN_LOST, pos);
        return Step::failed;
    }
    WqEntry &e = q.at(q.cursor);
    SegmentBuffer buf(e.nseg != kNotCached ? e.nseg : segment_room(vi, e.desc));
    Segment *segs = buf.get();
    uint32_t nseg;
    uint64_t capacity;
    uint32_t err = 0;
    if (e.nseg != kNotCached) {
        nseg = e.nseg;
        capacity = e.capacity;
        for (uint32_t i = 0; i < nseg; ++i) segs[i] = Segment{e.seg[i].addr, e.seg[i].len};
    } else {
        err = recv_segments(vi, e.desc, segs, buf.capacity(), &nseg, &capacity);
    }
    // An RDMA write's data went to the target region: only the immediate data uses the descriptor.
    if (!err && r.type != kRdmaWriteImm && total > capacity) err = VIP_STATUS_LENGTH_ERROR;
    if (err) {
        ++q.cursor;
        ep->frag = last ? Endpoint::Frag::none : Endpoint::Frag::dropping;
        wq_complete(vi, q, e, VIP_STATUS_OP_RECEIVE | err, 0);
        return refuse_message(vi, ep, pos, e.desc);
    }
    uint32_t status = VIP_STATUS_OP_RECEIVE;
    switch (r.type) {
    case kSend:
    case kSendFrag:
        scatter(segs, nseg, offset, payload, r.len);
        break;
    case kSendGet: {
        // Only where this side found at connection time that it may read the peer, and
        // from the kernel's pid of the peer: the pid in the record is the peer's word,
        // and would let it have this process read a third one's memory.
        if (!ep->can_access_peer) return Step::failed;
        Segment remote[256];
        std::memcpy(remote, body + sizeof(SendGetBody), sizeof(Segment) * nseg_remote);
        std::atomic_signal_fence(std::memory_order_seq_cst);
        if (cma_read(ep->peer_pid, segs, nseg, remote, nseg_remote, total) != total)
            status |= VIP_STATUS_TRANSPORT_ERROR;
        break;
    }
    case kRdmaWriteImm:
        status = VIP_STATUS_OP_REMOTE_RDMA_WRITE;
        break;
    }
    if (!last) {
        e.flags |= kWqStarted;
        ep->frag = Endpoint::Frag::filling;
        return Step::next;
    }
    ep->frag = Endpoint::Frag::none;
    if (r.flags & kRecImm) {
        status |= VIP_STATUS_IMMEDIATE;
        e.imm = r.imm;
        e.flags |= kWqImm;
    }
    ++q.cursor;
    ++vi->counters.RecvsCompleted;
    vi->counters.BytesReceived += total;
    wq_complete(vi, q, e, status, static_cast<uint32_t>(total));
    if ((status & VIP_STATUS_TRANSPORT_ERROR) && reliable(ep)) {
        break_connection(vi, ep, VIP_ERROR_CONN_LOST, VIP_ERROR_CONN_LOST, pos, e.desc);
        return Step::failed;
    }
    return Step::next;
}

// Target side of an RDMA write through the ring.
Step rdma_write_fragment(Vi *vi, Endpoint *ep, const Rec &r, const uint8_t *body, uint64_t pos) {
    FragBody b = load_once<FragBody>(body);
    bool first = r.flags & kRecFirst, last = r.flags & kRecLast;
    if (!first && ep->frag == Endpoint::Frag::dropping) {
        if (last) ep->frag = Endpoint::Frag::none;
        return Step::next;
    }
    if (!first && ep->frag != Endpoint::Frag::filling) return Step::failed;
    if (!fragment_in_order(ep, first, last, b.offset, b.total, r.len)) return Step::failed;
    if (!target_allows(vi, b.rhandle, b.raddr + b.offset, r.len, true) ||
        (first && !target_allows(vi, b.rhandle, b.raddr, b.total, true))) {
        if (reliable(ep)) {
            break_connection(vi, ep, VIP_ERROR_RDMAW_PROT, VIP_ERROR_CONN_LOST, pos);
            return Step::failed;
        }
        vi_report(vi, VIP_ERROR_RDMAW_PROT);
        ep->frag = last ? Endpoint::Frag::none : Endpoint::Frag::dropping;
        return Step::next;
    }
    memcpy(reinterpret_cast<void *>(b.raddr + b.offset), body + sizeof(FragBody), r.len);
    ep->frag = last ? Endpoint::Frag::none : Endpoint::Frag::filling;
    if (!last || !(r.flags & kRecImm)) return Step::next;
    // The last piece carries the immediate data: it consumes a receive descriptor.
    Rec note{kRdmaWriteImm, kRecImm, b.total, r.imm};
    return deliver(vi, ep, note, nullptr, 0, pos);
}

// Target side of an RDMA read through the ring: answer in pieces on our out ring.  The
// request is read once, when first seen; an answer that waits for room goes on from that
// copy, whatever the peer writes over the record meanwhile.
Step rdma_read_request(Vi *vi, Endpoint *ep, const uint8_t *body, uint64_t pos) {
    if (ep->read_resp_sent == 0) {
        ep->read_req = load_once<ReadReqBody>(body);
        if (!target_allows(vi, ep->read_req.rhandle, ep->read_req.raddr, ep->read_req.total,
                           false)) {
            break_connection(vi, ep, VIP_ERROR_RDMAR_PROT, VIP_ERROR_CONN_LOST, pos);
            return Step::failed;
        }
    }
    const ReadReqBody &b = ep->read_req;
    do {
        uint32_t chunk = std::min<uint32_t>(b.total - ep->read_resp_sent, max_chunk(ep));
        // The region may have been deregistered while the answer waited for room.
        if (!target_allows(vi, b.rhandle, b.raddr + ep->read_resp_sent, chunk, false)) {
            break_connection(vi, ep, VIP_ERROR_RDMAR_PROT, VIP_ERROR_CONN_LOST, pos);
            return Step::failed;
        }
        uint64_t bytes = sizeof(RecHdr) + sizeof(ReadRespBody) + chunk;
        uint64_t at = ring_reserve(ep, bytes);
        if (at == UINT64_MAX) return Step::stall;
        auto *resp = reinterpret_cast<ReadRespBody *>(ring_record(ep, at) + 1);
        resp->req = b.req;
        resp->offset = ep->read_resp_sent;
        resp->total = b.total;
        resp->status = 0;
        memcpy(resp + 1, reinterpret_cast<const void *>(b.raddr + ep->read_resp_sent), chunk);
        ep->read_resp_sent += chunk;
        bool last = ep->read_resp_sent == b.total;
        ring_publish(ep, at, bytes, kRdmaReadResp, last ? kRecLast : 0, chunk, 0);
    } while (ep->read_resp_sent < b.total);
    ep->read_resp_sent = 0;
    return Step::next;
}

// An answer that found the out ring full while this end is armed for arrivals only (a
// wait's last look, after arming, found the request) would sleep through the peer
// making room.  Arms for that too; true: the caller tries once more, since room made
// before the arming rang nobody.
bool arm_for_room(Vi *vi, Endpoint *ep) {
    uint64_t w = ep->me->waiter.load(std::memory_order_relaxed);
    if (!(w & kWakeAny) || (w & kWakeSend)) return false;
    arm(vi, kWakeSend);
    return true;
}

Step handle(Vi *vi, Endpoint *ep, const Rec &r, const uint8_t *body, uint32_t nseg, uint64_t pos) {
    switch (r.type) {
    case kPad:
        return Step::next;
    case kSend:
    case kSendGet:
    case kSendFrag:
    case kRdmaWriteImm:
        return deliver(vi, ep, r, body, nseg, pos);
    case kRdmaWriteFrag:
        return rdma_write_fragment(vi, ep, r, body, pos);
    case kRdmaReadReq:
        return rdma_read_request(vi, ep, body, pos);
    case kRdmaReadResp: {
        ReadRespBody b = load_once<ReadRespBody>(body);
        return read_response(vi, ep, b, body + sizeof(ReadRespBody), r.len, r.flags & kRecLast)
                   ? Step::next
                   : Step::failed;
    }
    case kError: {
        // An initiator reports only the protection errors it found on our memory.
        uint32_t code = load_once<ErrorBody>(body).code;
        if (code != VIP_ERROR_RDMAW_PROT && code != VIP_ERROR_RDMAR_PROT) return Step::failed;
        vi_report(vi, static_cast<VIP_ERROR_CODE>(code));
        return Step::next;
    }
    }
    return Step::failed;
}

// Whether the peer went back to the ring's start from pos (shm_send.cc: rewind_now).
// Looked at after the sequence word at pos: the peer writes the word before anything
// of the next lap, and what it writes there may, by chance, look like pos's record.
// Never at a lap's start, where no rewind is made (the zeroed word names position 0).
static bool rewound_here(const Endpoint *ep, uint64_t pos) {
    return (pos & ep->mask) != 0 && ep->peer->rewound_at.load(std::memory_order_acquire) == pos;
}

void progress_in(Vi *vi, Endpoint *ep) {
    uint64_t start = ep->consumed;
    uint64_t produced_before = ep->produced;
    for (int budget = 0; budget < 1024 && ep->up; ++budget) {
        uint64_t pos = ep->consumed;
        auto *r = reinterpret_cast<const RecHdr *>(ep->in + (pos & ep->mask));
        bool here = r->seq.load(std::memory_order_acquire) == seq_of(pos);
        if (rewound_here(ep, pos)) {
            ep->consumed = pos - (pos & ep->mask) + ep->ring_size;
            continue;
        }
        if (!here) break;
        Rec rec = load_rec(r);
        uint32_t nseg = 0;
        uint64_t size = record_size(ep, rec, pos, &nseg);
        const auto *body = reinterpret_cast<const uint8_t *>(r + 1);
        Step st = size ? handle(vi, ep, rec, body, nseg, pos) : Step::failed;
        if (st == Step::stall && arm_for_room(vi, ep)) st = handle(vi, ep, rec, body, nseg, pos);
        ep->stalled = st == Step::stall;
        if (st == Step::stall) break;
        if (st == Step::failed) {
            if (ep->up) break_connection(vi, ep, VIP_ERROR_CATASTROPHIC, VIP_ERROR_CONN_LOST, pos);
            return;
        }
        // Lines inside a record hold payload, which one lap later could pass
        // for a record header: blank their sequence words before the writer
        // may reuse them.  One-line records (small messages) have none.
        if (rec.type != kPad)
            for (uint64_t line = kLine; line < size; line += kLine)
                reinterpret_cast<RecHdr *>(ep->in + ((pos + line) & ep->mask))
                    ->seq.store(0, std::memory_order_relaxed);
        ep->consumed = pos + size;
    }
    if (!ep->up) return;
    if (ep->consumed != start) ep->me->consumed.store(ep->consumed, std::memory_order_release);
    unsigned what = (ep->consumed != start ? unsigned(kWakeSend) : 0u) |
                    (ep->produced != produced_before ? unsigned(kWakeRecv) : 0u);
    if (what) ring_peer(vi, ep, what);
}

// The error a peer that broke the connection asks this side to raise: one it may
// send (break_connection's remote codes), else the connection is simply lost.
VIP_ERROR_CODE peer_reason(uint32_t reason) {
    switch (reason) {
    case VIP_ERROR_CONN_LOST:
    case VIP_ERROR_RECVQ_EMPTY:
    case VIP_ERROR_RDMAW_PROT:
    case VIP_ERROR_RDMAR_PROT:
    case VIP_ERROR_POST_DESC:
    case VIP_ERROR_RDMA_TRANSPORT:
        return static_cast<VIP_ERROR_CODE>(reason);
    default:
        return VIP_ERROR_CONN_LOST;
    }
}

void peer_gone(Vi *vi, Endpoint *ep) {
    progress_in(vi, ep); // deliver what the peer sent before it went
    if (!ep->up) return;
    complete_acked(vi, ep);
    VIP_ERROR_CODE code = VIP_ERROR_CONN_LOST;
    if (ep->peer->state.load(std::memory_order_acquire) == kEndBroken) {
        fail_entry_at(vi, ep->peer->broken_at.load(std::memory_order_relaxed));
        code = peer_reason(ep->peer->reason.load(std::memory_order_relaxed));
    }
    transport_down(vi, ep);
    vi_fail(vi, code);
}

} // namespace

void break_connection(Vi *vi, Endpoint *ep, VIP_ERROR_CODE local, VIP_ERROR_CODE remote,
                      uint64_t at, VIP_DESCRIPTOR *desc) {
    if (!ep->up) return;
    ep->me->consumed.store(ep->consumed, std::memory_order_release);
    ep->me->reason.store(remote, std::memory_order_relaxed);
    ep->me->broken_at.store(at, std::memory_order_relaxed);
    ep->me->state.store(kEndBroken, std::memory_order_release);
    transport_down(vi, ep); // the socket's hang-up wakes the peer
    vi_fail(vi, local, desc);
}

void check_peer(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (ep && ep->up && peer_hung_up(vi, ep, true)) peer_gone(vi, ep);
}

bool pending(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return false;
    auto *r = reinterpret_cast<const RecHdr *>(ep->in + (ep->consumed & ep->mask));
    if (r->seq.load(std::memory_order_acquire) == seq_of(ep->consumed)) return true;
    if (rewound_here(ep, ep->consumed)) return true;
    if (ep->peer->state.load(std::memory_order_relaxed) != kEndUp) return true;
    // The peer's consumed word is written for every message it takes: read
    // it only when something here depends on it, or spinning makes it bounce.
    bool acks = ep->unacked != 0, space = vi->sq.cursor != vi->sq.tail;
    if (!acks && !space) return false;
    uint64_t c = ep->peer->consumed.load(std::memory_order_relaxed);
    return (acks && c != ep->acked) || (space && c != ep->peer_consumed);
}

void progress(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return;
    progress_in(vi, ep);
    if (!ep->up) return;
    if (ep->peer_lied) {
        break_connection(vi, ep, VIP_ERROR_CATASTROPHIC, VIP_ERROR_CONN_LOST, UINT64_MAX);
        return;
    }
    // The send side has work only if the peer consumed more or sends wait.
    if (ep->unacked && ep->peer->consumed.load(std::memory_order_relaxed) != ep->acked)
        complete_acked(vi, ep);
    if (vi->sq.cursor != vi->sq.tail) {
        uint64_t produced = ep->produced;
        push_sends(vi, ep);
        if (!ep->up) return;
        ring_for_records(vi, ep, produced);
    }
    // The clock is read every few calls only: the check is a fallback for
    // programs that never sleep (a sleeper hears the hang-up at once).
    if (ep->peer->state.load(std::memory_order_acquire) != kEndUp ||
        ((++ep->progress_calls & 7) == 0 && peer_hung_up(vi, ep, false)))
        peer_gone(vi, ep);
}

} // namespace vipl::shm
