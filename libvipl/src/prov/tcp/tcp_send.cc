// Sending: frames for the send queue, acknowledgements, error reports and
// answers to the peer's RDMA reads, written whole one after the other with
// the payload gathered straight from registered memory.
#include "core/arena.h"
#include "core/segments.h"
#include "core/vi.h"
#include "prov/tcp/tcp.h"

#include <cerrno>
#include <cstring>
#include <sys/socket.h>

namespace vipl::tcp {
namespace {

constexpr int kMaxIov = 256;
// Frames up to this size (headers included) are gathered into one buffer:
// copying 4 KiB costs less than the kernel's import of a message vector.
constexpr size_t kGather = 4096 + 64;
constexpr int kFramesPerCall = 256;
// Stands in for payload whose memory was deregistered while its frame was
// going out: the stream stays whole, the descriptor fails.
const uint8_t kZeros[4096] = {};

// Which messages complete only when the peer says they are placed: RDMA
// writes (a protection error at the target must reach the descriptor),
// sends under reliable reception, and under reliable delivery sends above
// TCP_ACK_THRESHOLD; others complete once the socket has them.  Below the
// threshold an acknowledgement would cost a system call per message on the
// target (see progress()), as much as the message itself.
bool acknowledged(const Endpoint *ep, uint16_t op, uint64_t length) {
    if (op == VIP_CONTROL_OP_RDMAWRITE) return true;
    if (op != VIP_CONTROL_OP_SENDRECV || ep->reliability == VIP_SERVICE_UNRELIABLE) return false;
    return ep->reliability == VIP_SERVICE_RELIABLE_RECEPTION || length > ep->ack_threshold;
}

bool reads_outstanding(Vi *vi, uint64_t before) {
    for (uint64_t i = vi->sq.visible; i < before; ++i) {
        const WqEntry &e = vi->sq.at(i);
        if (e.op == VIP_CONTROL_OP_RDMAREAD && !(e.flags & kWqDone)) return true;
    }
    return false;
}

void start(Endpoint *ep, Endpoint::Cur cur, const Frame &f, uint64_t payload) {
    encode_frame(f, ep->tx_header);
    ep->cur = cur;
    ep->tx_done = 0;
    ep->tx_total = kFrameHeader + payload;
}

// Shortens iov[0..n) to at most limit bytes; returns the entries left.
int clip(iovec *iov, int n, uint64_t limit) {
    for (int i = 0; i < n; ++i) {
        if (iov[i].iov_len >= limit) {
            iov[i].iov_len = limit;
            return limit ? i + 1 : i;
        }
        limit -= iov[i].iov_len;
    }
    return n;
}

void add_ctl(Endpoint *ep, const Frame &f) {
    encode_frame(f, ep->ctl + ep->ctl_len);
    ep->ctl_len += kFrameHeader;
}

// Makes e, the next of the send queue, the frame under way.
void begin_data(Endpoint *ep, WqEntry &e, const PostedDesc &d) {
    bool acked = acknowledged(ep, d.op, d.length);
    Frame f{};
    f.flags = d.imm ? kImm : 0;
    f.imm = d.imm ? d.imm_data : 0;
    uint64_t payload = d.length;
    switch (d.op) {
    case VIP_CONTROL_OP_RDMAWRITE:
        f.type = kRdmaWrite;
        f.handle = d.rhandle;
        f.addr = d.raddr;
        break;
    case VIP_CONTROL_OP_RDMAREAD:
        f.type = kRdmaReadReq;
        f.flags = 0;
        f.imm = static_cast<uint32_t>(d.length);
        f.handle = d.rhandle;
        f.addr = d.raddr;
        payload = 0;
        break;
    default:
        f.type = kSend;
        if (acked) f.flags |= kAckReq;
        break;
    }
    f.length = static_cast<uint32_t>(payload);
    e.flags |= kWqStarted;
    fault(e) = 0;
    if (acked) {
        ack_seq(e) = ep->ack_next++;
        e.flags |= kAckPending;
    }
    start(ep, Endpoint::kCurData, f, payload);
}

// No frame under way, no control frame or answer owed, output not blocked.
bool nothing_ahead(const Endpoint *ep) {
    return ep->cur == Endpoint::kCurNone && ep->ctl_done == ep->ctl_len &&
           ep->owed_head == ep->owed_tail && !ep->closing && !ep->owe_ack && !ep->owe_credit &&
           !ep->want_out;
}

Owed &owed_head(Endpoint *ep) {
    return ep->owed[ep->owed_head & (ep->owed_cap - 1)];
}

// Gathers the header-only frames that come next; then starts the frame with
// a payload that follows, if any.  Owed frames go before the
// acknowledgement: an error report must reach the peer before an
// acknowledgement that covers the failed message.
void pick(Vi *vi, Endpoint *ep, const PostedDesc *pre, uint64_t pre_index) {
    // Closing: what was placed before the failure is acknowledged first (the
    // failed message is not counted yet).
    if (ep->closing && ep->owe_ack) {
        ep->owe_ack = false;
        ep->ack_sent = ep->ack_taken;
        add_ctl(ep, Frame{kAck, 0, 0, 0, 0, ep->ack_taken});
    }
    while (ep->ctl_len + kFrameHeader <= sizeof ep->ctl) {
        if (ep->owed_head != ep->owed_tail) {
            Owed &o = owed_head(ep);
            if (o.kind == Owed::kError) {
                add_ctl(ep, Frame{kError, 0, 0, o.status, 0, o.addr});
                ++ep->owed_head;
                continue;
            }
            // The region may have gone since the request was checked.
            if (!o.status && !target_allows(vi, o.handle, o.addr, o.length, false))
                o.status = kReadRefused;
            if (o.status || !o.length) {
                add_ctl(ep, Frame{kRdmaReadResp, 0, 0, 0, o.status, 0});
                ++ep->owed_head;
                continue;
            }
            start(ep, Endpoint::kCurOwed, Frame{kRdmaReadResp, 0, o.length, 0, 0, 0}, o.length);
            return;
        }
        if (ep->closing) return;
        if (ep->owe_ack) {
            ep->owe_ack = false;
            ep->ack_sent = ep->ack_taken;
            add_ctl(ep, Frame{kAck, 0, 0, 0, 0, ep->ack_taken});
            continue;
        }
        if (!ep->owe_credit) break;
        ep->owe_credit = false;
        ep->credit_sent = ep->rx_bytes;
        add_ctl(ep, Frame{kCredit, 0, 0, 0, 0, ep->rx_bytes});
    }
    if (ep->owed_head != ep->owed_tail || ep->closing) return;
    WorkQueue &q = vi->sq;
    Segment segs[256];
    while (q.cursor < q.tail) {
        WqEntry &e = q.at(q.cursor);
        if (e.flags & kWqDone) {
            ++q.cursor;
            continue;
        }
        PostedDesc own;
        const PostedDesc *d = pre && pre_index == q.cursor ? pre : &own;
        if (d == &own) {
            uint32_t err =
                parse_descriptor(vi, e.desc, false, own, segs, vi->nic->attrs.MaxSegmentsPerDesc);
            if (err) {
                wq_complete(vi, q, e, err | status_op_bits(e.op, false), 0);
                ++q.cursor;
                continue;
            }
        }
        if (d->fence && reads_outstanding(vi, q.cursor)) return;
        begin_data(ep, e, *d);
        return;
    }
}

// The rest of the current frame as iovecs.
int rest(Vi *vi, Endpoint *ep, const PostedDesc *pre, uint64_t pre_index, iovec *iov, int max) {
    int n = 0;
    if (ep->tx_done < kFrameHeader)
        iov[n++] = iovec{ep->tx_header + ep->tx_done, kFrameHeader - ep->tx_done};
    uint64_t off = ep->tx_done > kFrameHeader ? ep->tx_done - kFrameHeader : 0;
    uint64_t left = ep->tx_total - kFrameHeader - off;
    if (!left) return n;
    if (ep->cur == Endpoint::kCurOwed) {
        const Owed &o = owed_head(ep);
        iov[n++] = iovec{reinterpret_cast<void *>(o.addr + off), left};
        return n;
    }
    WqEntry &e = vi->sq.at(vi->sq.cursor);
    Segment segs[256];
    PostedDesc own{};
    const PostedDesc *d = pre && pre_index == vi->sq.cursor ? pre : &own;
    uint32_t err = 0;
    if (d == &own && !fault(e))
        err = parse_descriptor(vi, e.desc, false, own, segs, vi->nic->attrs.MaxSegmentsPerDesc);
    if (err || fault(e) || d->length + kFrameHeader != ep->tx_total) {
        if (!fault(e)) fault(e) = err ? err : VIP_STATUS_PROTECTION_ERROR;
        iov[n++] = iovec{const_cast<uint8_t *>(kZeros), std::min<uint64_t>(left, sizeof kZeros)};
        return n;
    }
    return n + segments_to_iov(d->segs, d->nseg, off, left, iov + n, max - n);
}

// The current frame is out.
void frame_done(Vi *vi, Endpoint *ep) {
    Endpoint::Cur cur = ep->cur;
    ep->cur = Endpoint::kCurNone;
    if (cur == Endpoint::kCurOwed) {
        ++ep->owed_head;
        return;
    }
    if (cur != Endpoint::kCurData) return;
    WorkQueue &q = vi->sq;
    WqEntry &e = q.at(q.cursor);
    ++q.cursor;
    if (fault(e)) {
        wq_complete(vi, q, e, static_cast<uint32_t>(fault(e)) | status_op_bits(e.op, false), 0);
        return;
    }
    if (e.op == VIP_CONTROL_OP_RDMAREAD) {
        e.flags |= kAwaitResp;
        ++ep->awaiting;
    } else if (e.flags & kAckPending) {
        e.flags = static_cast<uint16_t>((e.flags & ~kAckPending) | kAwaitAck);
        ++ep->awaiting;
    } else {
        wq_complete(vi, q, e, status_op_bits(e.op, false), 0);
    }
}

// Accounts for w bytes written (control frames first); true if that ended
// the frame under way.
bool wrote(Vi *vi, Endpoint *ep, uint64_t w, bool more) {
    ep->corked = more;
    ep->tx_bytes += w;
    uint32_t c = static_cast<uint32_t>(std::min<uint64_t>(w, ep->ctl_len - ep->ctl_done));
    ep->ctl_done += c;
    ep->tx_done += w - c;
    if (ep->cur == Endpoint::kCurNone || ep->tx_done != ep->tx_total) return false;
    frame_done(vi, ep);
    return true;
}

bool flush(Vi *vi, Endpoint *ep, const PostedDesc *pre, uint64_t pre_index, bool more) {
    for (int frames = 0; ep->up;) {
        if (ep->cur == Endpoint::kCurNone && ep->ctl_done == ep->ctl_len) {
            ep->ctl_len = ep->ctl_done = 0;
            if (frames >= kFramesPerCall) {
                set_want_out(ep, true); // more to do: come back when the socket allows
                return true;
            }
            pick(vi, ep, pre, pre_index);
            if (ep->cur == Endpoint::kCurNone && !ep->ctl_len) {
                set_want_out(ep, false);
                return true;
            }
        }
        // Header-only frames go whatever the credit; a frame with a payload
        // only as far as the peer's window allows (it counts all we wrote).
        uint64_t unread = ep->tx_bytes - ep->peer_taken;
        uint64_t room = unread >= ep->window ? 0 : ep->window - unread;
        iovec iov[kMaxIov];
        int n = 0;
        if (ep->ctl_done < ep->ctl_len)
            iov[n++] = iovec{ep->ctl + ep->ctl_done, ep->ctl_len - ep->ctl_done};
        if (ep->cur != Endpoint::kCurNone && room) {
            int first = n;
            n += rest(vi, ep, pre, pre_index, iov + n, kMaxIov - n);
            n = first + clip(iov + first, n - first, room);
        }
        if (n == 0) { // waiting for credit: it comes as input
            set_want_out(ep, false);
            return true;
        }
        int flags = MSG_NOSIGNAL | MSG_DONTWAIT | (more ? MSG_MORE : 0);
        size_t total = 0;
        for (int i = 0; i < n; ++i) total += iov[i].iov_len;
        int saved = errno;
        ssize_t w;
        if (total <= kGather) {
            // A small frame in one piece: send() costs the kernel less than
            // importing a message header and its vector.
            uint8_t one[kGather];
            size_t at = 0;
            for (int i = 0; i < n; ++i) {
                memcpy(one + at, iov[i].iov_base, iov[i].iov_len);
                at += iov[i].iov_len;
            }
            w = send(ep->sock, one, total, flags);
        } else {
            msghdr mh{};
            mh.msg_iov = iov;
            mh.msg_iovlen = static_cast<size_t>(n);
            w = sendmsg(ep->sock, &mh, flags);
        }
        int err = errno;
        errno = saved;
        if (w < 0) {
            if (err == EINTR) continue;
            if (err == EAGAIN || err == EWOULDBLOCK) {
                set_want_out(ep, true);
                return true;
            }
            connection_lost(vi, ep, VIP_ERROR_CONN_LOST);
            return false;
        }
        if (wrote(vi, ep, static_cast<uint64_t>(w), more)) ++frames;
    }
    return false;
}

// The frame under way, its payload straight from d's buffers.  Apart from
// send_now() so that the common small case keeps a small stack frame.
__attribute__((noinline)) ssize_t send_frame_from(Endpoint *ep, const PostedDesc &d,
                                                  uint64_t payload) {
    iovec iov[kMaxIov];
    iov[0] = iovec{ep->tx_header, kFrameHeader};
    int n = 1 + segments_to_iov(d.segs, d.nseg, 0, payload, iov + 1, kMaxIov - 1);
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = static_cast<size_t>(n);
    return sendmsg(ep->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

// The common post: nothing else to write and a frame that the peer's window
// takes whole.  It goes out at once, by one send() when small (gathered
// here) or one sendmsg() straight from the registered buffers.  False if it
// is not that case (nothing done).  A short write leaves the frame under way
// for flush().
bool send_now(Vi *vi, Endpoint *ep, WqEntry &e, const PostedDesc &d, uint64_t index) {
    if (d.fence || d.nseg >= kMaxIov || vi->sq.cursor != index || !nothing_ahead(ep)) return false;
    uint64_t payload = d.op == VIP_CONTROL_OP_RDMAREAD ? 0 : d.length;
    if (payload && ep->tx_bytes - ep->peer_taken + kFrameHeader + payload > ep->window)
        return false;
    begin_data(ep, e, d);
    int saved = errno;
    ssize_t w;
    if (kFrameHeader + payload <= kGather) {
        uint8_t one[kGather];
        memcpy(one, ep->tx_header, kFrameHeader);
        gather(one + kFrameHeader, d.segs, d.nseg, 0, payload);
        w = send(ep->sock, one, kFrameHeader + payload, MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
        w = send_frame_from(ep, d, payload);
    }
    int err = errno;
    errno = saved;
    if (w > 0) {
        wrote(vi, ep, static_cast<uint64_t>(w), false);
    } else if (err != EINTR && err != EAGAIN && err != EWOULDBLOCK) {
        connection_lost(vi, ep, VIP_ERROR_CONN_LOST);
    }
    return true;
}

} // namespace

bool flush_out(Vi *vi, Endpoint *ep, bool more) {
    // Nothing to write (the usual case after input): no need to look further.
    if (nothing_ahead(ep) && vi->sq.cursor == vi->sq.tail) return ep->up;
    return flush(vi, ep, nullptr, 0, more);
}

VIP_RETURN post_send(Vi *vi, WqEntry *e, const PostedDesc &d) {
    Endpoint *ep = endpoint(vi);
    WorkQueue &q = vi->sq;
    if (!ep->up) {
        // The transport failed after the state check: flushed like the rest.
        wq_complete(vi, q, *e, status_op_bits(d.op, false) | VIP_STATUS_DESC_FLUSHED_ERROR, 0);
        q.cursor = q.tail;
        return VIP_SUCCESS;
    }
    uint64_t index = q.tail - 1;
    if (d.op == VIP_CONTROL_OP_SENDRECV) ep->answer_owed = true;
    if (!send_now(vi, ep, *e, d, index) || ep->cur != Endpoint::kCurNone)
        flush(vi, ep, &d, index, false);
    return VIP_SUCCESS;
}

void post_recv(Vi *, WqEntry *) {
    // Incoming frames find receives when the receiver's progress reads them.
}

bool owe(Vi *vi, Endpoint *ep, const Owed &o) {
    if (ep->owed_tail - ep->owed_head == ep->owed_cap) {
        uint32_t cap = ep->owed_cap ? ep->owed_cap * 2 : 16;
        if (cap > (1u << 20)) return false;
        auto *bigger = static_cast<Owed *>(object_alloc(sizeof(Owed) * cap, vi->shareable));
        if (!bigger) return false;
        for (uint64_t i = ep->owed_head; i < ep->owed_tail; ++i)
            bigger[i & (cap - 1)] = ep->owed[i & (ep->owed_cap - 1)];
        free_owed(vi, ep);
        ep->owed = bigger;
        ep->owed_cap = cap;
    }
    ep->owed[ep->owed_tail++ & (ep->owed_cap - 1)] = o;
    return true;
}

void free_owed(Vi *vi, Endpoint *ep) {
    if (ep->owed) object_free(ep->owed, sizeof(Owed) * ep->owed_cap, vi->shareable);
    ep->owed = nullptr;
    ep->owed_cap = 0;
}

bool acked(Vi *vi, Endpoint *ep, uint64_t upto) {
    if (upto < ep->ack_upto || upto > ep->ack_next) return false;
    WorkQueue &q = vi->sq;
    for (uint64_t i = q.visible; i < q.cursor && ep->awaiting; ++i) {
        WqEntry &e = q.at(i);
        if ((e.flags & kAwaitAck) && ack_seq(e) < upto) {
            e.flags &= ~kAwaitAck;
            --ep->awaiting;
            wq_complete(vi, q, e, status_op_bits(e.op, false), 0);
        }
    }
    ep->ack_upto = upto;
    return true;
}

bool remote_error(Vi *vi, Endpoint *ep, uint64_t seq, uint32_t code) {
    if (code != kNoError && code > VIP_ERROR_CATASTROPHIC) return false;
    if (seq != kNoSequence) {
        if (seq < ep->ack_upto || seq >= ep->ack_next) return false;
        WorkQueue &q = vi->sq;
        for (uint64_t i = q.visible; i < q.cursor; ++i) {
            WqEntry &e = q.at(i);
            if (!(e.flags & kAwaitAck) || ack_seq(e) != seq) continue;
            e.flags &= ~kAwaitAck;
            --ep->awaiting;
            uint32_t err = e.op == VIP_CONTROL_OP_SENDRECV ? VIP_STATUS_REMOTE_DESC_ERROR
                                                           : VIP_STATUS_RDMA_PROT_ERROR;
            wq_complete(vi, q, e, status_op_bits(e.op, false) | err, 0);
            break;
        }
    }
    if (code != kNoError) connection_lost(vi, ep, static_cast<VIP_ERROR_CODE>(code));
    return true;
}

} // namespace vipl::tcp
