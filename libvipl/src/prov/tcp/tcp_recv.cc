// Receiving: frames are read into a small buffer, payloads of any size go
// straight to their destination (a receive descriptor's segments, the RDMA
// target region, an RDMA read's local segments).  Every RDMA is checked here,
// on the target, before a byte of it is stored.
#include "core/clock.h"
#include "core/log.h"
#include "core/segments.h"
#include "core/vi.h"
#include "core/wait.h"
#include "prov/tcp/tcp.h"

#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>

namespace vipl::tcp {
namespace {

constexpr uint64_t kDirect = 4096;  // payload left at least this big: read in place
constexpr int kFramesPerCall = 256; // then let the caller breathe
constexpr uint64_t kBytesPerCall = 8 << 20;

enum class Io { more, dry, closed };

inline void set_lowat(Endpoint *ep);

// n more bytes taken from the socket: once a quarter of our window is
// taken, the peer hears it (at once: it may be waiting for that credit to
// send the rest of what we wait for).
void took(Vi *vi, Endpoint *ep, uint64_t n) {
    ep->rx_bytes += n;
    if (!ep->owe_credit && ep->rx_bytes - ep->credit_sent >= ep->my_window / 4) {
        ep->owe_credit = true;
        flush_out(vi, ep);
    }
}

bool reliable(const Endpoint *ep) {
    return ep->reliability != VIP_SERVICE_UNRELIABLE;
}

void protocol_error(Vi *vi, Endpoint *ep, const char *what) {
    VIPL_WARN("tcp: the peer of VI %p broke the protocol (%s): connection closed",
              vis().handle_of(vi), what);
    connection_lost(vi, ep, VIP_ERROR_CONN_LOST);
}

// Reads into the buffer.  A read that did not fill the room offered most
// likely emptied the socket: *maybe_more false spares the next read that
// would only say so (readiness is level-triggered: data that comes later
// wakes the next wait).
bool direct_sleeper(const Endpoint *ep) {
    return __atomic_load_n(&ep->direct, __ATOMIC_ACQUIRE) != 0;
}

// Moves the buffered bytes to the front: all the room is after them.
void compact_rx(Endpoint *ep) {
    if (ep->rx_start == ep->rx_end) {
        ep->rx_start = ep->rx_end = 0;
    } else if (ep->rx_start) {
        memmove(ep->rx, ep->rx + ep->rx_start, ep->rx_end - ep->rx_start);
        ep->rx_end -= ep->rx_start;
        ep->rx_start = 0;
    }
}

// A read found the socket empty: the next progress, often the caller's next call right
// after (a program's recv() then its poll(), a look then an arming), need not ask again;
// nor later than kDryTrustNs, when something may well have come.  Only the next: a
// progress that trusted it asks at the following one, so a spinner still reads every
// other look.  What comes meanwhile shows on the wait fd (level-triggered) or at the look
// after.
void mark_dry(Endpoint *ep) {
    ep->rx_dry = true;
    ep->rx_dry_until = now_ns() + kDryTrustNs;
}

Io fill(Vi *vi, Endpoint *ep, bool *maybe_more) {
    if (!*maybe_more || direct_sleeper(ep)) return Io::dry;
    compact_rx(ep);
    for (;;) {
        int saved = errno;
        ssize_t n = recv(ep->sock, ep->rx + ep->rx_end, kRxBuffer - ep->rx_end, MSG_DONTWAIT);
        int err = errno;
        errno = saved;
        if (n > 0) {
            *maybe_more = static_cast<uint32_t>(n) == kRxBuffer - ep->rx_end;
            if (!*maybe_more) mark_dry(ep); // a short read emptied the socket
            ep->rx_end += static_cast<uint32_t>(n);
            took(vi, ep, static_cast<uint64_t>(n));
            return ep->up ? Io::more : Io::closed;
        }
        if (n < 0 && err == EINTR) continue;
        if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
            mark_dry(ep);
            return Io::dry;
        }
        connection_lost(vi, ep, VIP_ERROR_CONN_LOST); // hang-up, reset or a dead link
        return Io::closed;
    }
}

// A receive's segments as checked at post (at most two): their count, or
// kNotCached when they must be parsed again.
uint32_t cached_segments(const WqEntry &e, Segment *segs) {
    if (e.nseg == kNotCached) return kNotCached;
    for (uint32_t i = 0; i < e.nseg; ++i) segs[i] = Segment{e.seg[i].addr, e.seg[i].len};
    return e.nseg;
}

// Where the rest of the current payload goes; 0 entries for discard.  A
// destination that became invalid mid-frame turns the frame into a discard.
int destination(Vi *vi, Endpoint *ep, iovec *iov, int max) {
    const Frame &f = ep->frame;
    uint64_t left = f.length - ep->got;
    Segment segs[256];
    switch (ep->sink) {
    case Sink::recv: {
        WqEntry &e = vi->rq.at(vi->rq.cursor);
        uint64_t capacity = 0;
        uint32_t nseg = cached_segments(e, segs);
        if (nseg == kNotCached &&
            recv_segments(vi, e.desc, segs, vi->nic->attrs.MaxSegmentsPerDesc, &nseg, &capacity))
            return -1;
        return segments_to_iov(segs, nseg, ep->got, left, iov, max);
    }
    case Sink::rdma:
        if (!target_allows(vi, f.handle, f.addr + ep->got, left, true)) return -1;
        iov[0] = iovec{reinterpret_cast<void *>(f.addr + ep->got), left};
        return 1;
    case Sink::read_resp: {
        WqEntry *e = oldest_read(vi);
        PostedDesc d;
        if (!e || parse_descriptor(vi, e->desc, false, d, segs, vi->nic->attrs.MaxSegmentsPerDesc))
            return -1;
        return segments_to_iov(d.segs, d.nseg, ep->got, left, iov, max);
    }
    default:
        return 0;
    }
}

void copy_out(const iovec *iov, int n, const uint8_t *src, uint64_t len) {
    for (int i = 0; i < n && len; ++i) {
        uint64_t take = std::min<uint64_t>(iov[i].iov_len, len);
        memcpy(iov[i].iov_base, src, take);
        src += take;
        len -= take;
    }
}

// A destination went away under a frame (memory deregistered meanwhile).
bool lost_destination(Vi *vi, Endpoint *ep) {
    if (ep->sink == Sink::recv) {
        WqEntry &e = vi->rq.at(vi->rq.cursor++);
        e.flags &= ~kFilling;
        wq_complete(vi, vi->rq, e, VIP_STATUS_OP_RECEIVE | VIP_STATUS_PROTECTION_ERROR, 0);
    } else if (ep->sink == Sink::read_resp) {
        if (WqEntry *e = oldest_read(vi)) {
            e->flags &= ~kAwaitResp;
            --ep->awaiting;
            wq_complete(vi, vi->sq, *e, VIP_STATUS_OP_RDMA_READ | VIP_STATUS_PROTECTION_ERROR, 0);
        }
    }
    bool write = ep->sink == Sink::rdma;
    ep->sink = Sink::discard;
    if (reliable(ep) || write) {
        break_connection(vi, ep, write ? VIP_ERROR_RDMAW_PROT : VIP_ERROR_POST_DESC,
                         VIP_ERROR_CONN_LOST, write ? ep->ack_taken : kNoSequence);
        return false;
    }
    return true;
}

// Delivers an RDMA write's immediate data to a receive descriptor.
bool write_notice(Vi *vi, Endpoint *ep) {
    const Frame &f = ep->frame;
    WorkQueue &q = vi->rq;
    if (q.cursor == q.tail) {
        if (!reliable(ep)) return true;
        break_connection(vi, ep, VIP_ERROR_RECVQ_EMPTY, VIP_ERROR_CONN_LOST, ep->ack_taken);
        return false;
    }
    WqEntry &e = q.at(q.cursor++);
    e.imm = f.imm;
    e.flags |= kWqImm;
    ++vi->counters.RecvsCompleted;
    wq_complete(vi, q, e, VIP_STATUS_OP_REMOTE_RDMA_WRITE | VIP_STATUS_IMMEDIATE, f.length);
    return true;
}

// The current frame's payload is all here.
bool finish(Vi *vi, Endpoint *ep) {
    const Frame &f = ep->frame;
    ep->in_payload = false;
    Sink sink = ep->sink;
    ep->sink = Sink::none;
    switch (f.type) {
    case kSend:
        if (sink == Sink::recv) {
            WorkQueue &q = vi->rq;
            WqEntry &e = q.at(q.cursor++);
            e.flags &= ~kFilling;
            uint32_t status = VIP_STATUS_OP_RECEIVE;
            if (f.flags & kImm) {
                status |= VIP_STATUS_IMMEDIATE;
                e.imm = f.imm;
                e.flags |= kWqImm;
            }
            ++vi->counters.RecvsCompleted;
            vi->counters.BytesReceived += f.length;
            ep->answer_owed = false;
            wq_complete(vi, q, e, status, f.length);
        }
        if (f.flags & kAckReq) {
            ++ep->ack_taken;
            ep->owe_ack = true;
        }
        return true;
    case kRdmaWrite:
        if (sink == Sink::rdma && (f.flags & kImm) && !write_notice(vi, ep)) return false;
        if (sink == Sink::rdma) vi->counters.BytesReceived += f.length;
        ++ep->ack_taken;
        ep->owe_ack = true;
        return true;
    case kRdmaReadResp:
        if (sink == Sink::read_resp) {
            WqEntry *e = oldest_read(vi);
            e->flags &= ~kAwaitResp;
            --ep->awaiting;
            wq_complete(vi, vi->sq, *e, VIP_STATUS_OP_RDMA_READ, f.length);
        }
        return true;
    default:
        return true;
    }
}

bool begin_send(Vi *vi, Endpoint *ep) {
    const Frame &f = ep->frame;
    uint64_t seq = (f.flags & kAckReq) ? ep->ack_taken : kNoSequence;
    WorkQueue &q = vi->rq;
    if (q.cursor == q.tail) {
        if (!reliable(ep)) return true; // dropped
        break_connection(vi, ep, VIP_ERROR_RECVQ_EMPTY, VIP_ERROR_CONN_LOST, seq);
        return false;
    }
    WqEntry &e = q.at(q.cursor);
    uint32_t err = 0;
    uint64_t capacity = e.capacity;
    if (e.nseg == kNotCached) {
        SegmentBuffer buf(segment_room(vi, e.desc));
        uint32_t nseg;
        err = recv_segments(vi, e.desc, buf.get(), buf.capacity(), &nseg, &capacity);
    }
    if (!err && f.length > capacity) err = VIP_STATUS_LENGTH_ERROR;
    if (err) {
        ++q.cursor;
        wq_complete(vi, q, e, VIP_STATUS_OP_RECEIVE | err, 0);
        if (!reliable(ep)) return true;
        break_connection(vi, ep, VIP_ERROR_POST_DESC, VIP_ERROR_CONN_LOST, seq, e.desc);
        return false;
    }
    e.flags |= kWqStarted | kFilling;
    ep->sink = Sink::recv;
    return true;
}

bool begin_write(Vi *vi, Endpoint *ep) {
    const Frame &f = ep->frame;
    if (target_allows(vi, f.handle, f.addr, f.length, true)) {
        ep->sink = Sink::rdma;
        return true;
    }
    if (reliable(ep)) {
        break_connection(vi, ep, VIP_ERROR_RDMAW_PROT, VIP_ERROR_CONN_LOST, ep->ack_taken);
        return false;
    }
    // Unreliable: the write is refused, the connection stays.
    vi_report(vi, VIP_ERROR_RDMAW_PROT);
    if (owe(vi, ep, Owed{Owed::kError, 0, 0, kNoError, ep->ack_taken})) return true;
    protocol_error(vi, ep, "more refused RDMA writes outstanding than any queue holds");
    return false;
}

bool read_request(Vi *vi, Endpoint *ep) {
    const Frame &f = ep->frame;
    bool allowed = target_allows(vi, f.handle, f.addr, f.imm, false);
    if (!owe(vi, ep, Owed{Owed::kRead, f.imm, f.handle, allowed ? 0u : kReadRefused, f.addr})) {
        protocol_error(vi, ep, "more RDMA reads outstanding than any queue holds");
        return false;
    }
    if (allowed) return true;
    if (!reliable(ep)) {
        vi_report(vi, VIP_ERROR_RDMAR_PROT);
        return true;
    }
    // The refusal goes out first, then the connection ends.
    break_connection(vi, ep, VIP_ERROR_RDMAR_PROT, VIP_ERROR_CONN_LOST, kNoSequence);
    return false;
}

bool begin_read_resp(Vi *vi, Endpoint *ep) {
    const Frame &f = ep->frame;
    WqEntry *e = oldest_read(vi);
    if (!e) {
        protocol_error(vi, ep, "an RDMA read answer nobody asked for");
        return false;
    }
    if (f.handle) {
        e->flags &= ~kAwaitResp;
        --ep->awaiting;
        wq_complete(vi, vi->sq, *e, VIP_STATUS_OP_RDMA_READ | VIP_STATUS_RDMA_PROT_ERROR, 0);
        return true;
    }
    Segment segs[256];
    PostedDesc d;
    if (parse_descriptor(vi, e->desc, false, d, segs, vi->nic->attrs.MaxSegmentsPerDesc) == 0 &&
        d.length != f.length) {
        protocol_error(vi, ep, "an RDMA read answer of the wrong length");
        return false;
    }
    ep->sink = Sink::read_resp;
    return true;
}

// A header is in; false if the connection ended.
bool begin(Vi *vi, Endpoint *ep) {
    const Frame &f = ep->frame;
    ep->got = 0;
    ep->sink = Sink::discard;
    ep->in_payload = true;
    bool ok = true;
    switch (f.type) {
    case kSend:
        ok = begin_send(vi, ep);
        break;
    case kRdmaWrite:
        ok = begin_write(vi, ep);
        break;
    case kRdmaReadReq:
        ok = read_request(vi, ep);
        break;
    case kRdmaReadResp:
        ok = begin_read_resp(vi, ep);
        break;
    case kAck:
        if (!acked(vi, ep, f.addr)) {
            protocol_error(vi, ep, "an acknowledgement out of range");
            return false;
        }
        break;
    case kError:
        if (!remote_error(vi, ep, f.addr, f.imm)) {
            protocol_error(vi, ep, "an error report out of range");
            return false;
        }
        ok = ep->up;
        break;
    case kCredit:
        if (f.addr < ep->peer_taken || f.addr > ep->tx_bytes) {
            protocol_error(vi, ep, "a credit for more than was sent");
            return false;
        }
        ep->peer_taken = f.addr;
        break;
    }
    return ok && ep->up;
}

// Moves payload bytes of the current frame; Io::more once it is complete.
Io payload(Vi *vi, Endpoint *ep, uint64_t *budget, bool *maybe_more) {
    const Frame &f = ep->frame;
    // The usual message: all of it buffered, for a receive whose segments
    // were checked at post.
    if (ep->sink == Sink::recv && ep->rx_end - ep->rx_start >= f.length - ep->got) {
        Segment segs[2];
        uint32_t nseg = cached_segments(vi->rq.at(vi->rq.cursor), segs);
        if (nseg != kNotCached) {
            uint64_t left = f.length - ep->got;
            scatter(segs, nseg, ep->got, ep->rx + ep->rx_start, left);
            ep->rx_start += static_cast<uint32_t>(left);
            ep->got += left;
            return finish(vi, ep) ? Io::more : Io::closed;
        }
    }
    while (ep->got < f.length) {
        uint64_t left = f.length - ep->got;
        uint32_t buffered = ep->rx_end - ep->rx_start;
        iovec iov[256];
        int n = destination(vi, ep, iov, 256);
        if (n < 0) {
            if (!lost_destination(vi, ep)) return Io::closed;
            n = 0;
        }
        if (buffered) {
            uint64_t take = std::min<uint64_t>(buffered, left);
            copy_out(iov, n, ep->rx + ep->rx_start, take);
            ep->rx_start += static_cast<uint32_t>(take);
            ep->got += take;
            continue;
        }
        if (left >= kDirect && n > 0) {
            if (!*maybe_more || direct_sleeper(ep)) return Io::dry;
            int saved = errno;
            msghdr mh{};
            mh.msg_iov = iov;
            mh.msg_iovlen = static_cast<size_t>(n);
            ssize_t got = recvmsg(ep->sock, &mh, MSG_DONTWAIT);
            int err = errno;
            errno = saved;
            if (got > 0) {
                *maybe_more = static_cast<uint64_t>(got) == left;
                ep->got += static_cast<uint64_t>(got);
                took(vi, ep, static_cast<uint64_t>(got));
                if (!ep->up) return Io::closed;
                *budget -= std::min<uint64_t>(*budget, static_cast<uint64_t>(got));
                if (!*budget && ep->got < f.length) return Io::dry;
                continue;
            }
            if (got < 0 && err == EINTR) continue;
            if (got < 0 && (err == EAGAIN || err == EWOULDBLOCK)) return Io::dry;
            connection_lost(vi, ep, VIP_ERROR_CONN_LOST);
            return Io::closed;
        }
        Io r = fill(vi, ep, maybe_more);
        if (r != Io::more) return r;
    }
    return finish(vi, ep) ? Io::more : Io::closed;
}

// Apart from set_lowat(), so that its usual outcome (no change) stays a few
// inlined comparisons.
__attribute__((noinline)) void apply_lowat(Endpoint *ep, uint32_t v) {
    int iv = static_cast<int>(v), saved = errno;
    setsockopt(ep->sock, SOL_SOCKET, SO_RCVLOWAT, &iv, sizeof iv);
    errno = saved;
    ep->lowat = v;
}

// The socket reads as ready only once the frame under way can complete: a
// program polling a wait fd is woken when there is a message to take, not
// for every piece of one.
inline void set_lowat(Endpoint *ep) {
    uint64_t want = 1;
    if (ep->in_payload)
        want = ep->frame.length - ep->got;
    else if (ep->rx_end - ep->rx_start < kFrameHeader)
        want = kFrameHeader - (ep->rx_end - ep->rx_start);
    // Never more than a sender short of credit can have sent: it waits for
    // our credit, which we give once we have read a quarter of our window.
    want = std::min<uint64_t>(want, ep->my_window / 4);
    uint32_t v = static_cast<uint32_t>(std::min<uint64_t>(want ? want : 1, 1u << 30));
    if (v != ep->lowat) apply_lowat(ep, v);
}

} // namespace

WqEntry *oldest_read(Vi *vi) {
    WorkQueue &q = vi->sq;
    for (uint64_t i = q.visible; i < q.cursor; ++i) {
        WqEntry &e = q.at(i);
        if (e.flags & kAwaitResp) return &e;
    }
    return nullptr;
}

// A frame is partly here: wait (bounded) for the rest, which the peer has
// started to write.  The readiness that brought the caller here then means a
// message to take, not a piece of one.  True if more can be read.  A signal
// handler's run ends the wait, and the Wait making this call (note_interrupted).
bool await_rest(Endpoint *ep, uint64_t *wait_end) {
    if (!ep->frame_wait_us || direct_sleeper(ep)) return false;
    bool partial = ep->in_payload || ep->rx_end != ep->rx_start;
    if (!partial) return false;
    uint64_t now = now_ns();
    if (!*wait_end) *wait_end = now + ep->frame_wait_us * 1000ull;
    if (now >= *wait_end) return false;
    set_lowat(ep); // one wake-up when all of it is here
    uint64_t left = *wait_end - now;
    timespec ts{static_cast<time_t>(left / 1000000000ull), static_cast<long>(left % 1000000000ull)};
    pollfd p{ep->sock, POLLIN, 0};
    int saved = errno;
    int n = ppoll(&p, 1, &ts, nullptr);
    if (n < 0 && errno == EINTR) note_interrupted();
    errno = saved;
    return n > 0;
}

// This call's share is used up with input left in the socket or the
// buffer.  A waiter may sleep on the socket next, which need not become
// readable again: the doorbell wakes it (and a program polling the wait
// fd), and its next call goes on.
void leave_more(Vi *vi, Endpoint *ep) {
    ep->rx_more = true;
    vi_wake(vi);
}

bool receive(Vi *vi, Endpoint *ep) {
    ep->rx_more = false;
    uint64_t budget = kBytesPerCall;
    bool maybe_more = !ep->rx_dry || now_ns() >= ep->rx_dry_until;
    ep->rx_dry = false;
    uint64_t wait_end = 0;
    for (int frames = 0; ep->up; ++frames) {
        if (frames >= kFramesPerCall) {
            leave_more(vi, ep);
            return true;
        }
        if (ep->in_payload) {
            Io r = payload(vi, ep, &budget, &maybe_more);
            if (r == Io::closed) return false;
            if (r == Io::dry) {
                if (budget && await_rest(ep, &wait_end)) {
                    maybe_more = true;
                    continue;
                }
                if (!budget) leave_more(vi, ep);
                set_lowat(ep);
                return true;
            }
            continue;
        }
        if (ep->rx_end - ep->rx_start < kFrameHeader) {
            // The usual end: all taken, and the last read emptied the socket.
            if (!maybe_more && ep->rx_start == ep->rx_end) {
                set_lowat(ep);
                return true;
            }
            Io r = fill(vi, ep, &maybe_more);
            if (r == Io::closed) return false;
            if (r == Io::dry) {
                if (await_rest(ep, &wait_end)) {
                    maybe_more = true;
                    continue;
                }
                set_lowat(ep);
                return true;
            }
            continue;
        }
        Decode dc = decode_frame(ep->rx + ep->rx_start, ep->mtu, &ep->frame);
        if (dc != Decode::ok) {
            protocol_error(vi, ep, decode_error_text(dc));
            return false;
        }
        ep->rx_start += kFrameHeader;
        if (!begin(vi, ep)) return false;
    }
    return false;
}

bool direct_begin(Vi *vi, ViOps::DirectSleep *d) {
    Endpoint *ep = endpoint(vi);
    // Not mid-frame (the rest is awaited as usual), nor with output
    // blocked (that needs POLLOUT), nor with input already here.
    if (!ep || !ep->up || !ep->rx || ep->want_out || ep->closing || ep->in_payload || ep->rx_more ||
        direct_sleeper(ep) || ep->rx_end - ep->rx_start >= kFrameHeader)
        return false;
    compact_rx(ep);
    d->fd = ep->sock;
    d->buf = ep->rx + ep->rx_end;
    d->len = kRxBuffer - ep->rx_end;
    d->slice_ns = kDirectSliceNs;
    d->state = &ep->direct;
    __atomic_store_n(&ep->direct, 1, __ATOMIC_RELEASE);
    return true;
}

void direct_end(Vi *vi, const ViOps::DirectSleep &d, ssize_t n, int err) {
    Endpoint *ep = endpoint(vi);
    if (!ep) return;
    // Another thread may tear down meanwhile (stop_direct); with none, no locked instruction.
    int state;
    if (Mutex::single_threaded()) {
        state = __atomic_load_n(&ep->direct, __ATOMIC_RELAXED);
        __atomic_store_n(&ep->direct, 0, __ATOMIC_RELAXED);
    } else {
        state = __atomic_exchange_n(&ep->direct, 0, __ATOMIC_ACQ_REL);
    }
    // Torn down meanwhile (stop_direct): what was read went with the connection.
    if (!state || !ep->up || d.buf != ep->rx + ep->rx_end) return;
    if (n > 0) {
        ep->rx_end += static_cast<uint32_t>(n);
        ep->rx_more = static_cast<size_t>(n) == d.len;
        ep->rx_dry = !ep->rx_more;
        ep->rx_dry_until = UINT64_MAX; // the sleeper's own read: trusted until the next look
        took(vi, ep, static_cast<uint64_t>(n));
    } else if (n == 0 || (err != EAGAIN && err != EWOULDBLOCK && err != EINTR)) {
        connection_lost(vi, ep, VIP_ERROR_CONN_LOST); // hang-up, reset or a dead link
    }
    // Others that slept meanwhile waited on the doorbell alone (sleep_fds).
    if (vi->sleepers.load(std::memory_order_seq_cst) > 0) vi_wake(vi);
}

void stop_direct(Endpoint *ep) {
    if (__atomic_load_n(&ep->direct, __ATOMIC_ACQUIRE) != 1 || ep->sock < 0) return;
    int saved = errno;
    shutdown(ep->sock, SHUT_RD); // ends the sleeper's recv()
    errno = saved;
    // It returns at once; the bound only guards against the unforeseen.
    uint64_t end = now_ns() + 2 * kDirectSliceNs;
    while (__atomic_load_n(&ep->direct, __ATOMIC_ACQUIRE) == 1 && now_ns() < end) sched_yield();
}

bool held(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    return ep && ep->up && (ep->rx_more || ep->rx_end - ep->rx_start >= kFrameHeader);
}

bool pending(Vi *vi) {
    if (held(vi)) return true;
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return false;
    pollfd p{ep->sock, static_cast<short>(POLLIN | (ep->want_out ? POLLOUT : 0)), 0};
    int saved = errno;
    int n = poll(&p, 1, 0);
    errno = saved;
    return n > 0;
}

void progress(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return;
    if (!receive(vi, ep)) return;
    // An acknowledgement alone waits in the kernel (MSG_MORE): the program
    // may answer the message it is about to take, and the answer pushes both
    // in one segment (one wake-up of the peer instead of two).  idle() pushes
    // it otherwise, and the kernel does within 200 ms if the program makes no
    // further call.  A stream of messages gets one every few, replies or not.
    bool only_ack = ep->owe_ack && ep->cur == Endpoint::kCurNone && ep->ctl_done == ep->ctl_len &&
                    ep->owed_head == ep->owed_tail && !ep->owe_credit && !ep->want_out &&
                    vi->sq.cursor == vi->sq.tail && ep->ack_taken - ep->ack_sent < 8;
    flush_out(vi, ep, only_ack);
}

void idle(Vi *vi) {
    Endpoint *ep = endpoint(vi);
    if (!ep || !ep->up) return;
    // Input taken from the socket but not yet looked at: a sleeper on the
    // socket would not see it.
    if (ep->rx_more || ep->rx_end - ep->rx_start >= kFrameHeader) progress(vi);
    if (!ep->up) return;
    if (ep->owe_ack) {
        flush_out(vi, ep);
    } else if (ep->corked) {
        // Setting TCP_NODELAY pushes what MSG_MORE held back.
        int one = 1;
        int saved = errno;
        setsockopt(ep->sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        errno = saved;
        ep->corked = false;
    }
}

} // namespace vipl::tcp
