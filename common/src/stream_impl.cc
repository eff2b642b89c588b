// Stream::Impl: resources, completions, credits, readiness.
#include "stream_impl.h"

#include "vipl/error.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/single_threaded.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <thread>

namespace vipl {

using detail::Header;
using detail::kHeaderSize;
using detail::Kind;
using detail::kRtsSize;

namespace {

size_t round_up(size_t n, size_t to) {
    return (n + to - 1) / to * to;
}

void fill(VIP_DESCRIPTOR *d, void *buf, uint32_t len, VIP_MEM_HANDLE mh) {
    std::memset(d, 0, sizeof *d);
    d->CS.SegCount = 1;
    d->CS.Length = len;
    d->DS[0].Local.Data.Address = buf;
    d->DS[0].Local.Handle = mh;
    d->DS[0].Local.Length = len;
}

std::error_code sys_error() {
    return std::error_code(errno, std::generic_category());
}

} // namespace

std::unique_ptr<Stream::Impl> Stream::Impl::create(std::shared_ptr<detail::Nic> nic,
                                                   const StreamOptions &options, uint64_t transfer,
                                                   std::error_code &ec) {
    const uint64_t mtu64 = detail::mtu_of_transfer_size(transfer);
    if (options.recv_buffers == 0 || options.send_buffers == 0 ||
        options.recv_buffers > kMaxBuffers || options.send_buffers > kMaxBuffers ||
        mtu64 <= kHeaderSize || mtu64 > detail::kMaxMtu ||
        transfer > nic->attrs().MaxTransferSize) {
        ec = std::make_error_code(std::errc::invalid_argument);
        return nullptr;
    }
    auto s = std::make_unique<Impl>();
    s->nic = std::move(nic);
    s->nic->sweep(); // regions of streams this process left whose last holder is gone
    s->owner_pid = getpid();
    s->opt = options;
    s->shared = options.shareable;
    // Zero copy is one process's (the caller's memory, heap pulls): never when shared.
    if (s->shared) s->opt.zcopy_threshold = s->opt.stage_threshold = 0;
    const auto mtu = static_cast<uint32_t>(mtu64);
    s->rdma_max = static_cast<uint32_t>(transfer);
    s->opt.buffer_size = mtu - kHeaderSize;
    s->nonblocking.store(options.nonblocking, std::memory_order_relaxed);
    s->mtu = mtu;
    s->payload = mtu - kHeaderSize;
    s->recv_data = options.recv_buffers;
    s->nrecv = s->recv_data + kCtlSlots;
    // Never more than every buffer: pushing one never allocates on the way of a message.
    if (!s->shared) s->repost_later.reserve(s->nrecv);
    s->nsend = options.send_buffers;
    s->batch = (s->recv_data + 3) / 4;

    // The state and its queues first, then the registered part on a page of its own.
    // Buffers start on a cache line: SEND-GET and the tcp provider's direct reads like it.
    size_t mtu_r = round_up(mtu, 64);
    size_t state = round_up(sizeof(State), 64);
    size_t rq = round_up(s->nrecv * sizeof(Msg), 64);
    size_t pending = round_up(s->nsend * sizeof(Out), 64);
    size_t stacks = round_up((s->nsend + kCtlSlots) * sizeof(uint32_t), 64);
    s->reg_off = round_up(state + rq + pending + stacks, 4096);
    size_t descs =
        round_up((s->nrecv + s->nsend + kCtlSlots + kRdmaSlots) * sizeof(VIP_DESCRIPTOR), 4096);
    s->mem_size = round_up(
        s->reg_off + descs + (s->nrecv + s->nsend) * mtu_r + kCtlSlots * kCtlBufSize, 4096);
    int flags = (s->shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS;
    void *p = mmap(nullptr, s->mem_size, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED) {
        ec = sys_error();
        return nullptr;
    }
    s->mem = static_cast<uint8_t *>(p);
    s->st = new (s->mem) State();
    State &t = *s->st;
    t.rq.init(reinterpret_cast<Msg *>(s->mem + state), s->nrecv);
    t.pending.init(reinterpret_cast<Out *>(s->mem + state + rq), s->nsend);
    auto *stack = reinterpret_cast<uint32_t *>(s->mem + state + rq + pending);
    t.free_slots.init(stack, s->nsend);
    t.free_ctl.init(stack + s->nsend, kCtlSlots);
    s->stride = mtu_r;
    s->rdesc = reinterpret_cast<VIP_DESCRIPTOR *>(s->mem + s->reg_off);
    s->sdesc = s->rdesc + s->nrecv;
    s->rbuf_ = s->mem + s->reg_off + descs;
    s->sbuf_ = s->rbuf_ + s->nrecv * mtu_r;
    s->cbuf_ = s->sbuf_ + s->nsend * mtu_r;
    if (s->shared && (ec = s->init_shared())) return nullptr;

    VIP_MEM_ATTRIBUTES ma{};
    ma.Ptag = s->nic->ptag();
    ma.Shareable = s->shared ? VIP_TRUE : VIP_FALSE;
    VIP_RETURN rc = VipRegisterMem(s->nic->handle(), s->mem + s->reg_off, s->mem_size - s->reg_off,
                                   &ma, &s->mh);
    if (rc != VIP_SUCCESS) {
        ec = make_vip_error(rc);
        return nullptr;
    }
    s->registered = true;

    VIP_VI_ATTRIBUTES va{};
    va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
    va.MaxTransferSize = transfer;
    va.Ptag = s->nic->ptag();
    va.Shareable = s->shared ? VIP_TRUE : VIP_FALSE;
    // The peer RDMA-reads zero-copy writes from this side (its library is this one).
    s->rdma_ok =
        !s->shared && (s->nic->attrs().RDMAReadSupport & VIP_SERVICE_RELIABLE_DELIVERY) != 0;
    va.EnableRdmaRead = s->rdma_ok ? VIP_TRUE : VIP_FALSE;
    // The stream arms the wait fd itself, only when it may sleep or a program may poll
    // fd(): a Done that finds nothing would make the peer ring for every message.
    if ((rc = VipCreateVi(s->nic->handle(), &va, nullptr, nullptr, &s->vi)) != VIP_SUCCESS ||
        (rc = VipGetViWaitFdEx(s->vi, VIP_WAITFD_EXPLICIT_ARM, &s->vi_fd)) != VIP_SUCCESS) {
        ec = make_vip_error(rc);
        return nullptr;
    }
    if (s->opt.ready_fd) {
        s->ev_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        s->ep_fd = epoll_create1(EPOLL_CLOEXEC);
        if (s->ev_fd < 0 || s->ep_fd < 0) {
            ec = sys_error();
            return nullptr;
        }
        epoll_event e{};
        e.events = EPOLLIN;
        if (epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, s->vi_fd, &e) != 0 ||
            epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, s->ev_fd, &e) != 0) {
            ec = sys_error();
            return nullptr;
        }
    }
    for (uint32_t i = 0; i < s->nsend; ++i) t.free_slots.push_back(s->nsend - 1 - i);
    for (uint32_t i = 0; i < kCtlSlots; ++i) t.free_ctl.push_back(i);
    // Every receive is posted before connecting: the peer may send at once.
    for (uint32_t i = 0; i < s->nrecv; ++i) {
        fill(&s->rdesc[i], s->rbuf(i), mtu, s->mh);
        if ((rc = VipPostRecv(s->vi, &s->rdesc[i], s->mh)) != VIP_SUCCESS) {
            ec = make_vip_error(rc);
            return nullptr;
        }
    }
    ec.clear();
    return s;
}

Stream::Impl::~Impl() {
    teardown();
}

void Stream::Impl::teardown() noexcept {
    bool destroyed = !vi;
    if (vi && st->connected) {
        VipDisconnect(vi);
        // After a disconnect every queued descriptor completes (flushed); take them all
        // back before the VI and the memory they point into can go.
        for (int i = 0; i < 2000 && !destroyed; ++i) {
            VIP_DESCRIPTOR *d;
            while (VipSendDone(vi, &d) != VIP_NOT_DONE) {
            }
            while (VipRecvDone(vi, &d) != VIP_NOT_DONE) {
            }
            VIP_RETURN rc = VipDestroyVi(vi);
            destroyed = rc == VIP_SUCCESS || rc == VIP_INVALID_PARAMETER;
            if (!destroyed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    // The peer reads the stage with RDMA reads of its own, which fail from now on.
    stage_release();
    // A VI never connected keeps its posted receives (VIPL cannot flush an Idle VI), and
    // one that would not go keeps descriptors pointing into our memory: closing the NIC
    // destroys both when we are its only user; otherwise the memory stays mapped (leaked)
    // rather than let the provider touch freed pages.
    vi = nullptr;
    vi_fd = -1;
    if (!destroyed) {
        if (nic.use_count() == 1) {
            nic.reset();
            registered = false;
        } else {
            mem = nullptr;
            new auto(std::move(leaked)); // as mem: never freed under a live descriptor
        }
    }
    // A fork child holds its parent's NIC in name only (VIPL refuses the handle there):
    // the registration is the parent's, and goes with its table.
    if (registered && mem && getpid() == owner_pid)
        VipDeregisterMem(nic->handle(), mem + reg_off, mh);
    registered = false;
    release_local();
}

void Stream::Impl::release_local() noexcept {
    // Not our last word on the mutex: nobody holds it here (it lives in the mapping).
    if (watched) detail::census_forget(&st->census);
    watched = false;
    if (mem) munmap(mem, mem_size);
    mem = nullptr;
    st = nullptr;
    for (int *fd : {&ep_fd, &ev_fd, &gone_r, &gone_w})
        if (*fd >= 0) ::close(*fd);
    ep_fd = ev_fd = gone_r = gone_w = -1;
    for (int &fd : kick_fd) {
        if (fd >= 0) ::close(fd);
        fd = -1;
    }
    pulled.clear();
    nic.reset();
}

void Stream::Impl::start() {
    st->connected = true;
    VIP_VI_ENDPOINTS e;
    peer_reads_alone = rdma_ok && opt.stage_threshold > 0 &&
                       VipQueryViEndpoints(vi, &e) == VIP_SUCCESS && e.PeerReadsAlone;
    VIP_UINT32 im = 0;
    inline_payload = 0;
    if (opt.inline_sends && VipQueryViInline(vi, &im) == VIP_SUCCESS && im > kHeaderSize)
        inline_payload = std::min<uint32_t>(payload, im - kHeaderSize);
    st->owed = recv_data;
    post_control();
    update_ready();
}

void Stream::Impl::set_broken(std::error_code why) {
    if (st->broken) return;
    st->broken = true;
    st->error = why;
    changed();
}

void Stream::Impl::on_send_done(VIP_DESCRIPTOR *d, VIP_RETURN rc) {
    State &t = *st;
    auto i = static_cast<uint32_t>(d - sdesc);
    changed();
    if (rc != VIP_SUCCESS) set_broken(std::make_error_code(std::errc::connection_reset));
    if (i < nsend) {
        t.free_slots.push_back(i);
    } else if (i < nsend + kCtlSlots) {
        t.free_ctl.push_back(i - nsend);
    } else {
        t.rdma_posted--;
        if (t.bounce_len && t.rdma_posted == 0) {
            // The front rts's next piece is in its buffer now (rts stay first while
            // a read is in flight).
            Msg &m = t.rq.front();
            if (rc == VIP_SUCCESS) {
                m.off = kHeaderSize;
                m.end = kHeaderSize + t.bounce_len;
                m.taken += t.bounce_len;
                t.stats.bytes_in += t.bounce_len;
            }
            t.bounce_len = 0;
        }
    }
}

void Stream::Impl::protocol_violation() {
    set_broken(std::make_error_code(std::errc::protocol_error));
    VipDisconnect(vi);
}

// What arrives is the peer's to choose: the header is decoded once, from our own
// receive buffer (no peer writes there after the VI completed it), and every field is
// bounded before it is used.
void Stream::Impl::on_recv(VIP_DESCRIPTOR *d, VIP_RETURN rc) {
    State &t = *st;
    auto slot = static_cast<uint32_t>(d - rdesc);
    changed();
    if (rc != VIP_SUCCESS) {
        // Flushed by a disconnect, or the connection failed: nothing more will arrive.
        set_broken(std::make_error_code(std::errc::connection_reset));
        return;
    }
    uint32_t got = d->CS.Length;
    Header h = detail::decode(rbuf(slot));
    uint32_t want = h.kind == Kind::data ? h.length : h.kind == Kind::rts ? kRtsSize : 0;
    // A shareable stream asked for no rts (kFlagNoRts): one is a broken protocol.
    bool ok = got >= kHeaderSize && got <= mtu && h.length == got - kHeaderSize &&
              h.length == want && (h.kind != Kind::data || h.length > 0) &&
              (h.kind >= Kind::data && h.kind <= Kind::stop) && !(shared && h.kind == Kind::rts) &&
              !t.rq.full() && t.credits + h.credits <= kMaxBuffers;
    if (!ok) {
        protocol_violation();
        return;
    }
    t.heard = true;
    if (h.flags & detail::kFlagNoRts) t.peer_no_rts = true;
    t.credits += h.credits;
    if (t.credits > t.credits_max) t.credits_max = t.credits;
    if (h.kind == Kind::data) {
        t.stats.messages_in++;
        t.stats.bytes_in += h.length;
        // A reader that lags would hold one buffer (and the writer's credit) per message
        // however small: a peer echoing small writes to a program blocked writing to it
        // would run out of credits after a few bytes, where a socket buffers hundreds
        // of kilobytes.  Bytes that fit behind the last unread message join it, so what
        // is buffered is bounded by bytes, not by messages.
        if (!t.rq.empty() && !t.rq.back().rts && !t.discarding &&
            (pulled.empty() || pulled[t.rq.back().slot].empty()) &&
            t.rq.back().end + h.length <= mtu) {
            Msg &b = t.rq.back();
            std::memcpy(rbuf(b.slot) + b.end, rbuf(slot) + kHeaderSize, h.length);
            b.end += h.length;
            t.stats.joined_in++;
            repost_owed(slot);
            t.owed++;
            return;
        }
        Msg m;
        m.slot = slot;
        m.off = kHeaderSize;
        m.end = got;
        t.rq.push_back(m);
        if (t.discarding) consume_front();
        return;
    }
    if (h.kind == Kind::rts) {
        t.stats.messages_in++;
        Msg m;
        m.slot = slot;
        m.off = m.end = kHeaderSize;
        m.rts = true;
        m.region = detail::decode_rts(rbuf(slot) + kHeaderSize);
        // A writer offers regions of 1 to kRegionMax bytes, at most kRtsMax at a time.
        if (m.region.length == 0 || m.region.length > kRegionMax) {
            protocol_violation();
            return;
        }
        t.rq.push_back(m);
        if (t.discarding) consume_front();
        return;
    }
    t.stats.control_in++;
    if (h.kind == Kind::fin) {
        if (h.flags & detail::kFlagClosed) t.peer_closed = true;
        if (h.flags & detail::kFlagSwitch) t.peer_switched = true;
        t.fin_rx = true;
        t.need_fin_ack = true;
    } else if (h.kind == Kind::fin_ack) {
        t.fin_ack_rx = true;
    } else if (h.kind == Kind::rts_done && t.rts_posted > 0) {
        t.rts_posted--;
        offered_pop(); // a staged part is free again
    } else if (h.kind == Kind::stop) {
        t.peer_stopped = true;
        changed(); // a writer waiting for credits must fail now
    }
    repost(slot);
}

void Stream::Impl::repost(uint32_t slot) {
    if (st->broken) return;
    fill(&rdesc[slot], rbuf(slot), mtu, mh);
    VIP_RETURN rc = VipPostRecv(vi, &rdesc[slot], mh);
    if (rc != VIP_SUCCESS) set_broken(std::make_error_code(std::errc::connection_reset));
}

// The front message has been read (or dropped): its buffer goes back to the VI and its
// credit to the peer.
void Stream::Impl::consume_front() {
    State &t = *st;
    const Msg &m = t.rq.front();
    uint32_t slot = m.slot;
    if (m.rts && !m.done_sent) t.need_rts_done++;
    t.rq.pop_front();
    if (!pulled.empty()) std::vector<uint8_t>().swap(pulled[slot]);
    repost_owed(slot);
    t.owed++;
}

void Stream::Impl::repost_owed(uint32_t slot) {
    // A shareable stream's holders would each need the list: they give buffers back now.
    if (shared)
        repost(slot);
    else
        repost_later.push_back(slot);
}

void Stream::Impl::flush_reposts() {
    for (uint32_t slot : repost_later) repost(slot);
    repost_later.clear();
}

bool Stream::Impl::reap_sends() {
    State &t = *st;
    VIP_DESCRIPTOR *d;
    VIP_RETURN rc;
    bool any = false;
    // Only sends in flight can complete: a look at an empty send queue is a system call
    // on a provider whose progress reads a socket (tcp).
    uint32_t in_flight =
        (nsend - t.free_slots.size()) + (kCtlSlots - t.free_ctl.size()) + t.rdma_posted;
    while (in_flight > 0 &&
           ((rc = VipSendDone(vi, &d)) == VIP_SUCCESS || rc == VIP_DESCRIPTOR_ERROR)) {
        on_send_done(d, rc);
        --in_flight;
        any = true;
    }
    return any;
}

bool Stream::Impl::progress(Look look) {
    if (!vi) return false;
    State &t = *st;
    VIP_DESCRIPTOR *d;
    VIP_RETURN rc;
    if (t.poisoned) {
        // Its queues may be half-changed: take the completions back, trust nothing.
        while (VipSendDone(vi, &d) != VIP_NOT_DONE) {
        }
        while (VipRecvDone(vi, &d) != VIP_NOT_DONE) {
        }
        return false;
    }
    const bool lazy = look == Look::read || look == Look::drain;
    const bool one = look == Look::read || look == Look::wait;
    bool any = (!lazy || sends_wanted()) && reap_sends();
    bool arrived = false;
    const uint64_t msgs_before = t.stats.messages_in;
    while ((rc = VipRecvDone(vi, &d)) == VIP_SUCCESS || rc == VIP_DESCRIPTOR_ERROR) {
        on_recv(d, rc);
        arrived = true;
        if (one && !t.broken && t.stats.messages_in != msgs_before) break;
    }
    any |= arrived;
    // The queue was looked at just now: a write in the next moments need not look again
    // (the stamp is for write_looks alone: without it no write looks first).
    if (arrived && !shared && opt.write_looks) drained_at = ticks();
    if (!any && !t.broken) {
        // The wait fd also fires when the VI leaves the Connected state.  A look at the
        // state takes the VI's lock (a process-shared one for a shareable stream): at most
        // once per tick of the coarse clock (1-4 ms) while nothing arrives, not at every
        // look of a request-reply exchange (several per message); a waiter the failure
        // woke finds its fd readable until the look.
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        uint64_t now = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
        VIP_VI_STATE vs;
        if (now != state_looked) {
            state_looked = now;
            if (VipQueryVi(vi, &vs, nullptr, nullptr, nullptr) == VIP_SUCCESS &&
                vs != VIP_STATE_CONNECTED)
                set_broken(std::make_error_code(std::errc::connection_reset));
        }
    }
    post_pending();
    post_control();
    // A region first in line is fetched piece by piece unless a blocking read is about
    // to take it directly.
    if (!t.broken && !direct_read && !t.discarding && t.rdma_posted == 0 && !t.rq.empty() &&
        t.rq.front().rts && t.rq.front().off == t.rq.front().end &&
        t.rq.front().taken < t.rq.front().region.length)
        start_bounce();
    return any;
}

bool Stream::Impl::front_ready(bool direct) const {
    const State &t = *st;
    if (t.rq.empty()) return false;
    const Msg &m = t.rq.front();
    if (!m.rts || m.off < m.end) return true;
    if (t.rdma_posted > 0) return false;
    return m.taken == m.region.length || direct;
}

size_t Stream::Impl::room() const {
    const State &t = *st;
    if (!opt.hold_back) {
        // Only what can be sent at once: a free buffer and a credit for each.
        size_t sendable = t.credits > t.pending.size() ? t.credits - t.pending.size() : 0;
        return std::min<size_t>(t.free_slots.size(), sendable) * payload;
    }
    size_t n = static_cast<size_t>(t.free_slots.size()) * payload;
    if (!t.pending.empty() && !t.pending.back().zc) n += payload - t.pending.back().len;
    return n;
}

void Stream::Impl::post_pending() {
    State &t = *st;
    while (!t.broken && t.credits > 0 && !t.pending.empty()) {
        auto [slot, len, zc] = t.pending.front();
        uint16_t c = credit_grant();
        VIP_DESCRIPTOR *d = &sdesc[slot];
        if (zc) {
            if (t.rts_posted >= kRtsMax) return; // see the header: the peer's control slots
            detail::encode(sbuf(slot), {Kind::rts, c, kRtsSize, header_flags()});
            detail::encode_rts(sbuf(slot) + kHeaderSize, {reinterpret_cast<uintptr_t>(zc),
                                                          staged(zc) ? stage_mh : zc_mh, len});
            fill(d, sbuf(slot), kHeaderSize + kRtsSize, mh);
        } else {
            detail::encode(sbuf(slot), {Kind::data, c, len, header_flags()});
            fill(d, sbuf(slot), kHeaderSize + len, mh);
        }
        VIP_RETURN rc = VipPostSend(vi, d, mh);
        if (rc != VIP_SUCCESS) {
            set_broken(std::make_error_code(std::errc::connection_reset));
            return;
        }
        if (zc) {
            t.rts_posted++;
            if (staged(zc)) {
                offered_push(static_cast<int>((zc - stage) / kStagePart));
                t.stats.bytes_staged += len;
            } else {
                offered_push(-1);
                t.stats.bytes_zcopy += len;
            }
        }
        t.pending.pop_front();
        data_sent(c, len);
    }
}

void Stream::Impl::data_sent(uint16_t c, size_t len) {
    State &t = *st;
    t.owed -= c;
    t.credits--;
    t.stats.messages_out++;
    t.stats.bytes_out += len;
}

bool Stream::Impl::send_inline(const std::byte *p, size_t k) {
    State &t = *st;
    uint16_t c = credit_grant();
    uint8_t hdr[kHeaderSize];
    detail::encode(hdr, {Kind::data, c, static_cast<uint32_t>(k), header_flags()});
    VIP_INLINE_SEGMENT seg[2] = {{hdr, kHeaderSize}, {p, static_cast<VIP_UINT32>(k)}};
    VIP_RETURN rc = VipPostSendInline(vi, seg, 2);
    if (rc == VIP_ERROR_RESOURCE) return false;
    if (rc != VIP_SUCCESS) {
        set_broken(std::make_error_code(std::errc::connection_reset));
        return false;
    }
    data_sent(c, k);
    t.stats.bytes_inline += k;
    return true;
}

bool Stream::Impl::send_control(Kind kind) {
    State &t = *st;
    if (t.broken || t.free_ctl.empty()) return false;
    uint32_t i = t.free_ctl.back();
    uint16_t c = credit_grant();
    uint8_t flags = header_flags();
    if (kind == Kind::fin && t.discarding) flags |= detail::kFlagClosed;
    if (kind == Kind::fin && t.switch_out) flags |= detail::kFlagSwitch;
    detail::encode(cbuf(i), {kind, c, 0, flags});
    VIP_DESCRIPTOR *d = &sdesc[nsend + i];
    fill(d, cbuf(i), kHeaderSize, mh);
    VIP_RETURN rc = VipPostSend(vi, d, mh);
    if (rc != VIP_SUCCESS) {
        set_broken(std::make_error_code(std::errc::connection_reset));
        return false;
    }
    t.free_ctl.pop_back();
    t.owed -= c;
    t.stats.control_out++;
    return true;
}

void Stream::Impl::post_control() {
    State &t = *st;
    if (t.broken) return;
    if (t.need_fin_ack && send_control(Kind::fin_ack)) t.need_fin_ack = false;
    while (t.need_rts_done > 0 && send_control(Kind::rts_done)) t.need_rts_done--;
    if (t.stop_wanted && !t.stop_tx && send_control(Kind::stop)) t.stop_tx = true;
    // Batching keeps the peer's unprocessed credit messages within kCtlSlots (see header).
    // The buffers behind the credits go back to the VI first.
    if (t.owed >= batch) {
        flush_reposts();
        send_control(Kind::credit);
    }
    if (t.fin_wanted && !t.fin_tx && t.pending.empty() && send_control(Kind::fin)) t.fin_tx = true;
}

SpinBudget Stream::Impl::spin_budget() const {
    VIP_SPIN_BUDGET b{};
    if (!vi || !opt.spin_us) return {};
    // Threads would race for the remembered answer: they ask every time.
    bool reuse = __libc_single_threaded;
    // 0 where there are no ticks: no reuse then.
    uint64_t now = reuse ? ticks() : 0;
    if (now && now < budget_until_) return budget_;
    if (VipViSpinBudget(vi, static_cast<VIP_UINT64>(opt.spin_us) * 1000, &b) != VIP_SUCCESS)
        return {};
    // No time with the peer's CPU known: the peer waits on this CPU (vipl_ext.h).
    SpinBudget r{std::chrono::nanoseconds(b.Nanoseconds), static_cast<uint32_t>(b.YieldEvery),
                 b.Nanoseconds == 0 && b.PeerCpuKnown};
    if (now && won_last_) {
        budget_ = r;
        budget_until_ = now + kBudgetReuseTicks;
    }
    return r;
}

void Stream::Impl::spin_outcome(bool won) {
    if (!vi) return;
    bool reuse = __libc_single_threaded;
    // A win after a win changes nothing in the policy (its misses are at 0 already).
    if (reuse && won && won_last_) return;
    VipViSpinOutcome(vi, won ? VIP_TRUE : VIP_FALSE);
    // A miss changes the budget, and a win after misses restores it: ask again.
    budget_until_ = 0;
    won_last_ = won;
}

short Stream::Impl::events() const {
    const State &t = *st;
    short e = 0;
    if (readable()) e |= POLLIN;
    if (writable()) e |= POLLOUT;
    if (t.fin_rx) e |= POLLRDHUP;
    if (t.broken) e |= POLLERR | POLLHUP;
    if (t.fin_rx && t.fin_wanted) e |= POLLHUP;
    return e;
}

size_t Stream::Impl::readable_bytes() const {
    const State &t = *st;
    if (t.poisoned) return 0;
    size_t n = 0;
    // What read() copies without waiting: whole messages in line, up to the first
    // region still to be fetched.
    for (uint32_t i = 0; i < t.rq.size(); ++i) {
        const Msg &m = t.rq[i];
        n += m.end - m.off;
        if (m.rts && m.taken < m.region.length) break;
    }
    return n;
}

void Stream::Impl::update_ready() {
    // Nobody polls fd() yet (Stream::fd() makes it truthful when it hands it out).
    if (!fd_given.load(std::memory_order_relaxed)) return;
    State &t = *st;
    bool ready = (events() & (t.fd_events | POLLERR | POLLHUP)) != 0;
    // The program may sleep on fd() now: the VI's next event must make it readable (and
    // no completion left in it, or it would at once).
    if (!ready && reap_for_arming(VIP_ARM_ANY))
        ready = (events() & (t.fd_events | POLLERR | POLLHUP)) != 0;
    if (!ready) VipArmViWaitFd(vi);
    if (ev_fd < 0) return;
    if (ready && !t.ev_set) {
        uint64_t one = 1;
        ssize_t r = ::write(ev_fd, &one, sizeof one);
        (void)r;
        t.ev_set = true;
    } else if (!ready && t.ev_set) {
        uint64_t v;
        ssize_t r = ::read(ev_fd, &v, sizeof v);
        (void)r;
        t.ev_set = false;
    }
}

} // namespace vipl
