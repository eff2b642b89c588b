// Sending: posting descriptors into the out ring, RDMA by the initiator,
// completing sends once the receiver has consumed them.
#include "core/config.h"
#include "core/segments.h"
#include "core/vi.h"
#include "prov/shm/shm.h"

#include <algorithm>
#include <cstring>

namespace vipl::shm {
namespace {

constexpr uint16_t kAwaitAck = kWqProv1;  // completes when the peer consumed up to ring_end
constexpr uint16_t kAwaitResp = kWqProv2; // RDMA read answered through the ring
constexpr uint16_t kDataMoved = kWqProv3; // RDMA write done, immediate record still to send
// SEND-GET records (64 bytes each) kept free of copies at a ring's end: a stream's 24
// receive credits fit with room to spare.
constexpr uint64_t kGetReserve = 64;
// Traffic that never fills the ring goes round this much of it (rewind_now).
constexpr uint64_t kRewindBytes = 32 * 1024;

// What a send-queue entry's provider words (WqEntry::p0..p2) hold here.
// The out-ring position past the entry's last record: done once the peer consumed it.
inline uint64_t &ring_end(WqEntry &e) {
    return e.p0;
}
// The out-ring position of its first record (which record a failure report names).
inline uint64_t &ring_first(WqEntry &e) {
    return e.p1;
}
// Bytes of it gone into the ring as fragments, or of an RDMA read's answers taken.
inline uint64_t &moved(WqEntry &e) {
    return e.p2;
}
constexpr uint64_t kNone = UINT64_MAX;

enum class Push { done, blocked };

bool reliable_reception(const Endpoint *ep) {
    return ep->reliability == VIP_SERVICE_RELIABLE_RECEPTION;
}
bool reliable(const Endpoint *ep) {
    return ep->reliability != VIP_SERVICE_UNRELIABLE;
}

bool aligned(const PostedDesc &d, uint32_t align) {
    if (align <= 1) return true;
    for (uint32_t i = 0; i < d.nseg; ++i)
        if (d.segs[i].addr % align) return false;
    return true;
}

void started(WqEntry &e, uint64_t first_pos, uint64_t end) {
    if (!(e.flags & kWqStarted)) ring_first(e) = first_pos;
    e.flags |= kWqStarted;
    ring_end(e) = end;
}

// The send is in the ring: done now, or once the receiver has consumed it.
void pushed(Vi *vi, Endpoint *ep, WqEntry &e, bool needs_ack) {
    if (needs_ack) {
        e.flags |= kAwaitAck;
        ++ep->unacked;
        return;
    }
    wq_complete(vi, vi->sq, e, status_op_bits(e.op, false), 0);
}

// A protection error found by the initiator on the target's memory.
Push refuse_rdma(Vi *vi, Endpoint *ep, WqEntry &e, bool write) {
    wq_complete(vi, vi->sq, e, status_op_bits(e.op, false) | VIP_STATUS_RDMA_PROT_ERROR, 0);
    VIP_ERROR_CODE code = write ? VIP_ERROR_RDMAW_PROT : VIP_ERROR_RDMAR_PROT;
    if (reliable(ep)) {
        break_connection(vi, ep, VIP_ERROR_CONN_LOST, code, UINT64_MAX, e.desc);
    } else {
        uint64_t pos = ring_reserve(ep, sizeof(RecHdr) + sizeof(ErrorBody));
        if (pos != kNone) {
            auto *b = reinterpret_cast<ErrorBody *>(ring_record(ep, pos) + 1);
            b->code = code;
            ring_publish(ep, pos, sizeof(RecHdr) + sizeof(ErrorBody), kError, 0, 0, 0);
        }
    }
    return Push::done;
}

// Copies through the ring in pieces: sends and RDMA writes when cross-memory
// attach is not possible, and sends too large for one record.
Push push_fragments(Vi *vi, Endpoint *ep, WqEntry &e, const PostedDesc &d, RecType type) {
    uint64_t len = d.length;
    uint32_t chunk_max = max_chunk(ep);
    do {
        uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(len - moved(e), chunk_max));
        uint64_t bytes = sizeof(RecHdr) + sizeof(FragBody) + chunk;
        uint64_t pos = ring_reserve(ep, bytes);
        if (pos == kNone) return Push::blocked;
        auto *b = reinterpret_cast<FragBody *>(ring_record(ep, pos) + 1);
        b->offset = static_cast<uint32_t>(moved(e));
        b->total = static_cast<uint32_t>(len);
        b->raddr = d.raddr;
        b->rhandle = d.rhandle;
        gather(reinterpret_cast<uint8_t *>(b + 1), d.segs, d.nseg, moved(e), chunk);
        uint16_t flags = (moved(e) == 0 ? kRecFirst : 0) |
                         (moved(e) + chunk == len ? kRecLast : 0) | (d.imm ? kRecImm : 0);
        ring_publish(ep, pos, bytes, type, flags, chunk, d.imm_data);
        started(e, pos, ep->produced);
        moved(e) += chunk;
    } while (moved(e) < len);
    ++vi->counters.PipelineSends;
    pushed(vi, ep, e, reliable_reception(ep));
    return Push::done;
}

// A send copied whole into one record: its position, or kNone when the ring lacks room.
// `keep_reserve`: the ring's last records stay free for SEND-GET (see push_send).
uint64_t copy_send(Vi *vi, Endpoint *ep, const Segment *segs, uint32_t nseg, uint64_t len,
                   bool keep_reserve, bool imm, uint32_t imm_data) {
    uint64_t bytes = sizeof(RecHdr) + len;
    uint64_t reserve = std::min<uint64_t>(ep->ring_size / 4, kGetReserve * 64);
    uint64_t pos = ring_reserve(ep, bytes, keep_reserve ? ep->ring_size - reserve : 0);
    if (pos == kNone) return kNone;
    gather(reinterpret_cast<uint8_t *>(ring_record(ep, pos) + 1), segs, nseg, 0, len);
    ring_publish(ep, pos, bytes, kSend, imm ? kRecImm : 0, static_cast<uint32_t>(len), imm_data);
    ++vi->counters.CopySends;
    return pos;
}

Push push_send(Vi *vi, Endpoint *ep, WqEntry &e, const PostedDesc &d) {
    uint64_t len = d.length;
    uint64_t bytes = sizeof(RecHdr) + len;
    uint64_t get_bytes = sizeof(RecHdr) + sizeof(SendGetBody) + sizeof(Segment) * d.nseg;
    bool can_get =
        ep->peer_can_access_me && aligned(d, ep->get_align) && get_bytes <= ep->ring_size / 2;
    // Copying wins only while the message fits one record: a copy in pieces makes the
    // receiver drain the ring while the sender waits (on one CPU a hand-off per piece),
    // and costs more than the receiver's one system call of SEND-GET.  And only up to a
    // reserve at the ring's end: a post that finds no room goes out at the sender's next
    // call into the library (a stream that handed over its last bytes may make none for
    // long), so the reserve stays for SEND-GET records, which the receiver reads on its
    // own (kGetReserve of them, more than a stream's credits; a quarter of a small ring).
    if (!can_get || (len <= ep->copy_threshold && bytes <= ep->ring_size / 2)) {
        if (bytes > ep->ring_size / 2 || (e.flags & kWqStarted))
            return push_fragments(vi, ep, e, d, kSendFrag);
        uint64_t pos = copy_send(vi, ep, d.segs, d.nseg, len, can_get, d.imm, d.imm_data);
        if (pos != kNone) {
            started(e, pos, ep->produced);
            pushed(vi, ep, e, reliable_reception(ep));
            return Push::done;
        }
        if (!can_get) return Push::blocked;
    }
    uint64_t pos = ring_reserve(ep, get_bytes);
    if (pos == kNone) return Push::blocked;
    auto *b = reinterpret_cast<SendGetBody *>(ring_record(ep, pos) + 1);
    b->pid = static_cast<uint32_t>(self_pid());
    b->nseg = d.nseg;
    memcpy(b + 1, d.segs, sizeof(Segment) * d.nseg);
    ring_publish(ep, pos, get_bytes, kSendGet, d.imm ? kRecImm : 0, static_cast<uint32_t>(len),
                 d.imm_data);
    started(e, pos, ep->produced);
    ++vi->counters.GetSends;
    pushed(vi, ep, e, true); // the sender's buffer is in use until the receiver read it
    return Push::done;
}

Push push_rdma_write(Vi *vi, Endpoint *ep, WqEntry &e, const PostedDesc &d) {
    if (!ep->can_access_peer) return push_fragments(vi, ep, e, d, kRdmaWriteFrag);
    if (!(e.flags & kDataMoved)) {
        if (!remote_allows(ep, d.rhandle, d.raddr, d.length, true))
            return refuse_rdma(vi, ep, e, true);
        uint64_t moved = cma_write(ep->peer_pid, d.segs, d.nseg, d.raddr, d.length);
        if (moved != d.length) {
            wq_complete(vi, vi->sq, e, VIP_STATUS_OP_RDMA_WRITE | VIP_STATUS_TRANSPORT_ERROR, 0);
            if (reliable(ep))
                break_connection(vi, ep, VIP_ERROR_RDMA_TRANSPORT, VIP_ERROR_CONN_LOST, UINT64_MAX,
                                 e.desc);
            return Push::done;
        }
        e.flags |= kDataMoved | kWqStarted;
    }
    if (!d.imm) {
        wq_complete(vi, vi->sq, e, VIP_STATUS_OP_RDMA_WRITE, 0);
        return Push::done;
    }
    uint64_t pos = ring_reserve(ep, sizeof(RecHdr));
    if (pos == kNone) return Push::blocked;
    ring_publish(ep, pos, sizeof(RecHdr), kRdmaWriteImm, kRecImm, static_cast<uint32_t>(d.length),
                 d.imm_data);
    ring_first(e) = pos;
    ring_end(e) = ep->produced;
    pushed(vi, ep, e, reliable_reception(ep));
    return Push::done;
}

Push push_rdma_read(Vi *vi, Endpoint *ep, WqEntry &e, const PostedDesc &d, uint64_t index) {
    if (ep->can_access_peer) {
        if (!remote_allows(ep, d.rhandle, d.raddr, d.length, false))
            return refuse_rdma(vi, ep, e, false);
        Segment remote{d.raddr, d.length};
        uint64_t moved = cma_read(ep->peer_pid, d.segs, d.nseg, &remote, 1, d.length);
        uint32_t status =
            VIP_STATUS_OP_RDMA_READ | (moved == d.length ? 0 : VIP_STATUS_TRANSPORT_ERROR);
        wq_complete(vi, vi->sq, e, status, static_cast<uint32_t>(moved));
        if (moved != d.length && reliable(ep))
            break_connection(vi, ep, VIP_ERROR_RDMA_TRANSPORT, VIP_ERROR_CONN_LOST, UINT64_MAX,
                             e.desc);
        return Push::done;
    }
    uint64_t bytes = sizeof(RecHdr) + sizeof(ReadReqBody);
    uint64_t pos = ring_reserve(ep, bytes);
    if (pos == kNone) return Push::blocked;
    auto *b = reinterpret_cast<ReadReqBody *>(ring_record(ep, pos) + 1);
    b->raddr = d.raddr;
    b->rhandle = d.rhandle;
    b->total = static_cast<uint32_t>(d.length);
    b->req = index;
    ring_publish(ep, pos, bytes, kRdmaReadReq, 0, 0, 0);
    started(e, pos, ep->produced);
    moved(e) = 0;
    e.flags |= kAwaitResp;
    return Push::done;
}

Push push_entry(Vi *vi, Endpoint *ep, WqEntry &e, const PostedDesc &d, uint64_t index) {
    switch (d.op) {
    case VIP_CONTROL_OP_RDMAWRITE:
        return push_rdma_write(vi, ep, e, d);
    case VIP_CONTROL_OP_RDMAREAD:
        return push_rdma_read(vi, ep, e, d, index);
    default:
        return push_send(vi, ep, e, d);
    }
}

bool reads_outstanding(Vi *vi, uint64_t before) {
    for (uint64_t i = vi->sq.visible; i < before; ++i) {
        const WqEntry &e = vi->sq.at(i);
        if (e.op == VIP_CONTROL_OP_RDMAREAD && !(e.flags & kWqDone)) return true;
    }
    return false;
}

} // namespace

uint32_t max_chunk(const Endpoint *ep) {
    uint32_t c = ep->ring_size / 4;
    if (c > 65536) c = 65536;
    return c - static_cast<uint32_t>(sizeof(RecHdr) + sizeof(ReadRespBody));
}

RecHdr *ring_record(Endpoint *ep, uint64_t pos) {
    return reinterpret_cast<RecHdr *>(ep->out + (pos & ep->mask));
}

static bool take_peer_consumed(Endpoint *ep, uint64_t c) {
    // The peer consumes what we produced, in order: a counter that goes back or past
    // what we wrote is a lie (it could make us overwrite records it has not read, or
    // complete sends early), and the connection ends at the next progress.
    if (c < ep->peer_consumed || c > ep->produced) {
        ep->peer_lied = true;
        return false;
    }
    ep->peer_consumed = c;
    return true;
}

// Whether to go back to the ring's start now, though the record fits before its end:
// when the peer has taken everything (a request-reply connection, or a stream between
// bursts), and kRewindBytes or more of this lap are behind.  Then traffic that never
// fills the ring keeps going round its first kRewindBytes, lines both ends hold in
// cache, and a connection's pages past them are never touched (a database backend
// holds 80 KiB of its connection memory, not 2 MiB), while a stream that keeps the ring
// full uses all of it.  The peer's counter (a line it writes) is read once per
// kRewindBytes of ring at most.
static bool rewind_now(Endpoint *ep, uint64_t pos, uint64_t off) {
    if (off < kRewindBytes || pos < ep->next_rewind) return false;
    ep->next_rewind = (pos & ~(kRewindBytes - 1)) + kRewindBytes;
    if (pos != ep->peer_consumed &&
        !take_peer_consumed(ep, ep->peer->consumed.load(std::memory_order_acquire)))
        return false;
    return pos == ep->peer_consumed;
}

// Where the peer has taken the ring up to, for room: past a rewind it has not reached
// yet, which skips nothing it has to read.  The skipped lines are free at once: no
// record marks the rewind (a pad would hold its line, and the burst behind it to the
// lines before), the word rewound_at does, which the reader looks at in every record's
// place.
static uint64_t taken(const Endpoint *ep) {
    return ep->peer_consumed == ep->rewound_from ? ep->rewound_to : ep->peer_consumed;
}

uint64_t ring_reserve(Endpoint *ep, uint64_t bytes, uint64_t limit) {
    if (!limit) limit = ep->ring_size;
    bytes = round_line(bytes);
    uint64_t pos = ep->produced;
    uint64_t off = pos & ep->mask;
    if (rewind_now(ep, pos, off)) {
        ep->me->rewound_at.store(pos, std::memory_order_release);
        ep->rewound_from = pos;
        pos += ep->ring_size - off;
        ep->rewound_to = ep->produced = pos;
        off = 0;
    }
    uint64_t pad = off + bytes > ep->ring_size ? ep->ring_size - off : 0;
    uint64_t need = pad + bytes;
    if (pos + need - taken(ep) > limit) {
        if (!take_peer_consumed(ep, ep->peer->consumed.load(std::memory_order_acquire)))
            return kNone;
        if (pos + need - taken(ep) > limit) return kNone;
    }
    if (pad) {
        RecHdr *r = ring_record(ep, pos);
        r->type = kPad;
        r->flags = 0;
        r->len = static_cast<uint32_t>(pad);
        r->imm = 0;
        r->seq.store(seq_of(pos), std::memory_order_release);
        pos += pad;
        ep->produced = pos;
    }
    return pos;
}

void ring_publish(Endpoint *ep, uint64_t pos, uint64_t bytes, uint16_t type, uint16_t flags,
                  uint32_t len, uint32_t imm) {
    RecHdr *r = ring_record(ep, pos);
    r->type = type;
    r->flags = flags;
    r->len = len;
    r->imm = imm;
    r->seq.store(seq_of(pos), std::memory_order_release);
    ep->produced = pos + round_line(bytes);
    // The peer read these lines on the previous lap.  Owning them before they
    // are written keeps the next post's locked instructions (VI lock, doorbell
    // barrier) from waiting for their transfer; the line right after this
    // record is skipped because a spinning peer is polling it.
    for (uint64_t k = 2; k <= 5; ++k)
        prefetch_for_write(ep->out + ((ep->produced + k * kLine) & ep->mask));
}

void push_sends(Vi *vi, Endpoint *ep) {
    WorkQueue &q = vi->sq;
    Segment segs[256];
    uint32_t max_segs = vi->nic->attrs.MaxSegmentsPerDesc;
    while (ep->up && q.cursor < q.tail) {
        WqEntry &e = q.at(q.cursor);
        if (!(e.flags & kWqDone)) {
            PostedDesc d;
            uint32_t err = parse_descriptor(vi, e.desc, false, d, segs, max_segs);
            if (err) {
                wq_complete(vi, q, e, err | status_op_bits(e.op, false), 0);
            } else {
                if (d.fence && reads_outstanding(vi, q.cursor)) break;
                if (push_entry(vi, ep, e, d, q.cursor) == Push::blocked) break;
            }
        }
        ++q.cursor;
    }
}

VIP_RETURN post_send(Vi *vi, WqEntry *e, const PostedDesc &d) {
    Endpoint *ep = endpoint(vi);
    WorkQueue &q = vi->sq;
    uint64_t index = q.tail - 1;
    const uint64_t produced = ep->produced;
    if (!ep->up) {
        // The transport failed after the state check: flushed like the rest.
        wq_complete(vi, q, *e, status_op_bits(d.op, false) | VIP_STATUS_DESC_FLUSHED_ERROR, 0);
        q.cursor = q.tail;
        return VIP_SUCCESS;
    }
    if (q.cursor == index && !(d.fence && reads_outstanding(vi, index))) {
        if (push_entry(vi, ep, *e, d, index) == Push::done && q.cursor == index) ++q.cursor;
    } else {
        complete_acked(vi, ep);
        push_sends(vi, ep);
    }
    // A stream's writer waiting for its reader's answer would otherwise wake for nothing
    // while the reader fetches its region by cross-memory copy.
    ring_for_records(vi, ep, produced);
    return VIP_SUCCESS;
}

// An inline send is a copied send with no queue entry: it fits one record, within the
// same limits as push_send's copies (a message over the copy threshold is cheaper for
// the receiver to fetch with SEND-GET, which needs registered memory).
uint32_t inline_max(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return 0;
    uint64_t fits = ep->ring_size / 2 - sizeof(RecHdr);
    return static_cast<uint32_t>(std::min<uint64_t>(ep->copy_threshold, fits));
}

VIP_RETURN post_inline(Vi *vi, const Segment *segs, uint32_t nseg, uint64_t len) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return VIP_INVALID_STATE;
    WorkQueue &q = vi->sq;
    const uint64_t produced = ep->produced;
    // A posted send still waiting for room goes first (it may find room now).
    if (q.cursor != q.tail) {
        complete_acked(vi, ep);
        push_sends(vi, ep);
    }
    // The same reserve at the ring's end as a copied send leaves for SEND-GET records.
    VIP_RETURN rc = VIP_ERROR_RESOURCE;
    if (!ep->up)
        rc = VIP_INVALID_STATE; // the transport failed while the posted ones went out
    else if (q.cursor == q.tail &&
             copy_send(vi, ep, segs, nseg, len, ep->peer_can_access_me, false, 0) != kNone)
        rc = VIP_SUCCESS;
    // Posted sends that went out first wake the peer too, even when this one cannot.
    ring_for_records(vi, ep, produced);
    return rc;
}

void post_recv(Vi *, WqEntry *) {
    // Receives are matched by the receiver's own progress: nothing to tell the peer.
}

void complete_acked(Vi *vi, Endpoint *ep) {
    if (!ep->up) return;
    uint64_t c = ep->peer->consumed.load(std::memory_order_acquire);
    if (!take_peer_consumed(ep, c)) return;
    ep->acked = c;
    WorkQueue &q = vi->sq;
    for (uint64_t i = q.visible; i < q.cursor; ++i) {
        WqEntry &e = q.at(i);
        if ((e.flags & kAwaitAck) && ring_end(e) <= c) {
            e.flags &= ~kAwaitAck;
            --ep->unacked;
            wq_complete(vi, q, e, status_op_bits(e.op, false), 0);
        }
    }
}

// Marks the send whose record failed at the receiver (position pos of our out ring).
void fail_entry_at(Vi *vi, uint64_t pos) {
    WorkQueue &q = vi->sq;
    for (uint64_t i = q.visible; i < q.cursor; ++i) {
        WqEntry &e = q.at(i);
        if ((e.flags & kWqDone) || !(e.flags & kWqStarted)) continue;
        if (ring_first(e) <= pos && pos < ring_end(e)) {
            if (e.flags & kAwaitAck) --endpoint(vi)->unacked;
            uint32_t err = e.op == VIP_CONTROL_OP_SENDRECV ? VIP_STATUS_REMOTE_DESC_ERROR
                                                           : VIP_STATUS_RDMA_PROT_ERROR;
            e.flags &= ~(kAwaitAck | kAwaitResp);
            wq_complete(vi, q, e, status_op_bits(e.op, false) | err, 0);
            return;
        }
    }
}

// An answer to one of our RDMA reads through the ring.
bool read_response(Vi *vi, Endpoint *, const ReadRespBody &resp, const uint8_t *chunk, uint32_t len,
                   bool last) {
    WorkQueue &q = vi->sq;
    const ReadRespBody *b = &resp; // the receiver's copy, read once from the ring
    if (b->req < q.visible || b->req >= q.cursor) return false;
    WqEntry &e = q.at(b->req);
    if (e.op != VIP_CONTROL_OP_RDMAREAD || !(e.flags & kAwaitResp) || b->offset != moved(e))
        return false;
    if (b->status) {
        e.flags &= ~kAwaitResp;
        wq_complete(vi, q, e, VIP_STATUS_OP_RDMA_READ | VIP_STATUS_RDMA_PROT_ERROR, 0);
        return true;
    }
    Segment segs[256];
    PostedDesc d;
    uint32_t err = parse_descriptor(vi, e.desc, false, d, segs, vi->nic->attrs.MaxSegmentsPerDesc);
    if (err || b->total != d.length || static_cast<uint64_t>(b->offset) + len > d.length) {
        e.flags &= ~kAwaitResp;
        wq_complete(vi, q, e, VIP_STATUS_OP_RDMA_READ | (err ? err : VIP_STATUS_LENGTH_ERROR), 0);
        return true;
    }
    scatter(d.segs, d.nseg, b->offset, chunk, len);
    moved(e) += len;
    if (last) {
        e.flags &= ~kAwaitResp;
        wq_complete(vi, q, e, VIP_STATUS_OP_RDMA_READ, b->total);
    }
    return true;
}

} // namespace vipl::shm
