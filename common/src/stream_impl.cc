// Stream::Impl: resources, completions, credits.
#include "stream_impl.h"

#include "vipl/error.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
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

} // namespace

std::unique_ptr<Stream::Impl> Stream::Impl::create(std::shared_ptr<detail::Nic> nic,
                                                   const StreamOptions &options, uint32_t mtu,
                                                   std::error_code &ec) {
    if (options.recv_buffers == 0 || options.send_buffers == 0 || options.recv_buffers > 1024 ||
        options.send_buffers > 1024 || mtu <= kHeaderSize || mtu > nic->attrs().MaxTransferSize) {
        ec = std::make_error_code(std::errc::invalid_argument);
        return nullptr;
    }
    auto s = std::make_unique<Impl>();
    s->nic = std::move(nic);
    s->opt = options;
    s->opt.buffer_size = mtu - kHeaderSize;
    s->mtu = mtu;
    s->payload = mtu - kHeaderSize;
    s->recv_data = options.recv_buffers;
    s->nrecv = s->recv_data + kCtlSlots;
    s->nsend = options.send_buffers;
    s->batch = (s->recv_data + 3) / 4;

    // Buffers start on a cache line: SEND-GET and the tcp provider's direct reads like it.
    size_t mtu_r = round_up(mtu, 64);
    size_t descs =
        round_up((s->nrecv + s->nsend + kCtlSlots + kRdmaSlots) * sizeof(VIP_DESCRIPTOR), 4096);
    s->mem_size = round_up(descs + (s->nrecv + s->nsend) * mtu_r + kCtlSlots * kCtlBufSize, 4096);
    void *p =
        mmap(nullptr, s->mem_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        ec = std::error_code(errno, std::generic_category());
        return nullptr;
    }
    s->mem = static_cast<uint8_t *>(p);
    s->stride = mtu_r;
    s->rdesc = reinterpret_cast<VIP_DESCRIPTOR *>(s->mem);
    s->sdesc = s->rdesc + s->nrecv;
    s->rbuf_ = s->mem + descs;
    s->sbuf_ = s->rbuf_ + s->nrecv * mtu_r;
    s->cbuf_ = s->sbuf_ + s->nsend * mtu_r;

    VIP_MEM_ATTRIBUTES ma{};
    ma.Ptag = s->nic->ptag();
    VIP_RETURN rc = VipRegisterMem(s->nic->handle(), s->mem, s->mem_size, &ma, &s->mh);
    if (rc != VIP_SUCCESS) {
        ec = make_vip_error(rc);
        return nullptr;
    }
    s->registered = true;

    VIP_VI_ATTRIBUTES va{};
    va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
    va.MaxTransferSize = mtu;
    va.Ptag = s->nic->ptag();
    // The peer RDMA-reads zero-copy writes from this side (its library is this one).
    s->rdma_ok = (s->nic->attrs().RDMAReadSupport & VIP_SERVICE_RELIABLE_DELIVERY) != 0;
    va.EnableRdmaRead = s->rdma_ok ? VIP_TRUE : VIP_FALSE;
    if ((rc = VipCreateVi(s->nic->handle(), &va, nullptr, nullptr, &s->vi)) != VIP_SUCCESS ||
        (rc = VipGetViWaitFd(s->vi, &s->vi_fd)) != VIP_SUCCESS) {
        ec = make_vip_error(rc);
        return nullptr;
    }
    s->ev_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    s->ep_fd = epoll_create1(EPOLL_CLOEXEC);
    if (s->ev_fd < 0 || s->ep_fd < 0) {
        ec = std::error_code(errno, std::generic_category());
        return nullptr;
    }
    epoll_event e{};
    e.events = EPOLLIN;
    if (epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, s->vi_fd, &e) != 0 ||
        epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, s->ev_fd, &e) != 0) {
        ec = std::error_code(errno, std::generic_category());
        return nullptr;
    }
    for (uint32_t i = 0; i < s->nsend; ++i) s->free_slots.push_back(s->nsend - 1 - i);
    for (uint32_t i = 0; i < kCtlSlots; ++i) s->free_ctl.push_back(i);
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
    if (vi && connected) {
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
    if (registered && mem) VipDeregisterMem(nic->handle(), mem, mh);
    registered = false;
    if (mem) munmap(mem, mem_size);
    mem = nullptr;
    if (ep_fd >= 0) ::close(ep_fd);
    if (ev_fd >= 0) ::close(ev_fd);
    ep_fd = ev_fd = -1;
    rq.clear();
    pending.clear();
    nic.reset();
}

void Stream::Impl::start() {
    connected = true;
    owed = recv_data;
    post_control();
    update_ready();
}

void Stream::Impl::set_broken(std::error_code why) {
    if (broken) return;
    broken = true;
    error = why;
}

void Stream::Impl::on_send_done(VIP_DESCRIPTOR *d, VIP_RETURN rc) {
    auto i = static_cast<uint32_t>(d - sdesc);
    if (rc != VIP_SUCCESS) set_broken(std::make_error_code(std::errc::connection_reset));
    if (i < nsend) {
        free_slots.push_back(i);
    } else if (i < nsend + kCtlSlots) {
        free_ctl.push_back(i - nsend);
    } else {
        rdma_posted--;
        if (bounce_len && rdma_posted == 0) {
            // The front rts's next piece is in its buffer now (rts stay first while
            // a read is in flight).
            Msg &m = rq.front();
            if (rc == VIP_SUCCESS) {
                m.off = kHeaderSize;
                m.end = kHeaderSize + bounce_len;
                m.taken += bounce_len;
                stats.bytes_in += bounce_len;
            }
            bounce_len = 0;
        }
    }
}

void Stream::Impl::on_recv(VIP_DESCRIPTOR *d, VIP_RETURN rc) {
    auto slot = static_cast<uint32_t>(d - rdesc);
    if (rc != VIP_SUCCESS) {
        // Flushed by a disconnect, or the connection failed: nothing more will arrive.
        set_broken(std::make_error_code(std::errc::connection_reset));
        return;
    }
    uint32_t got = d->CS.Length;
    Header h = detail::decode(rbuf(slot));
    uint32_t want = h.kind == Kind::data ? h.length : h.kind == Kind::rts ? kRtsSize : 0;
    bool ok = got >= kHeaderSize && h.length == got - kHeaderSize && h.length == want &&
              (h.kind != Kind::data || h.length > 0) &&
              (h.kind >= Kind::data && h.kind <= Kind::rts_done);
    if (!ok) {
        set_broken(std::make_error_code(std::errc::protocol_error));
        VipDisconnect(vi);
        return;
    }
    credits += h.credits;
    if (h.kind == Kind::data) {
        stats.messages_in++;
        stats.bytes_in += h.length;
        Msg m;
        m.slot = slot;
        m.off = kHeaderSize;
        m.end = got;
        rq.push_back(std::move(m));
        if (discarding) consume_front();
        return;
    }
    if (h.kind == Kind::rts) {
        stats.messages_in++;
        Msg m;
        m.slot = slot;
        m.off = m.end = kHeaderSize;
        m.rts = true;
        m.region = detail::decode_rts(rbuf(slot) + kHeaderSize);
        if (m.region.length == 0) {
            set_broken(std::make_error_code(std::errc::protocol_error));
            VipDisconnect(vi);
            return;
        }
        rq.push_back(std::move(m));
        if (discarding) consume_front();
        return;
    }
    stats.control_in++;
    if (h.kind == Kind::fin) {
        fin_rx = true;
        need_fin_ack = true;
    } else if (h.kind == Kind::fin_ack) {
        fin_ack_rx = true;
    } else if (h.kind == Kind::rts_done && rts_posted > 0) {
        rts_posted--;
    }
    repost(slot);
}

void Stream::Impl::repost(uint32_t slot) {
    if (broken) return;
    fill(&rdesc[slot], rbuf(slot), mtu, mh);
    VIP_RETURN rc = VipPostRecv(vi, &rdesc[slot], mh);
    if (rc != VIP_SUCCESS) set_broken(std::make_error_code(std::errc::connection_reset));
}

// The front message has been read (or dropped): its buffer goes back to the VI and its
// credit to the peer.
void Stream::Impl::consume_front() {
    uint32_t slot = rq.front().slot;
    if (rq.front().rts && !rq.front().done_sent) need_rts_done++;
    rq.pop_front();
    repost(slot);
    owed++;
}

void Stream::Impl::progress() {
    if (!vi) return;
    bool any = false;
    VIP_DESCRIPTOR *d;
    VIP_RETURN rc;
    while ((rc = VipSendDone(vi, &d)) == VIP_SUCCESS || rc == VIP_DESCRIPTOR_ERROR) {
        on_send_done(d, rc);
        any = true;
    }
    while ((rc = VipRecvDone(vi, &d)) == VIP_SUCCESS || rc == VIP_DESCRIPTOR_ERROR) {
        on_recv(d, rc);
        any = true;
    }
    if (!any && !broken) {
        // The wait fd also fires when the VI leaves the Connected state.
        VIP_VI_STATE st;
        if (VipQueryVi(vi, &st, nullptr, nullptr, nullptr) == VIP_SUCCESS &&
            st != VIP_STATE_CONNECTED)
            set_broken(std::make_error_code(std::errc::connection_reset));
    }
    post_pending();
    post_control();
    // A region first in line is fetched piece by piece unless a blocking read is about
    // to take it directly.
    if (!broken && !direct_read && !discarding && rdma_posted == 0 && !rq.empty() &&
        rq.front().rts && rq.front().off == rq.front().end &&
        rq.front().taken < rq.front().region.length)
        start_bounce();
}

bool Stream::Impl::front_ready(bool direct) const {
    if (rq.empty()) return false;
    const Msg &m = rq.front();
    if (!m.rts || m.off < m.end) return true;
    if (rdma_posted > 0) return false;
    return m.taken == m.region.length || direct;
}

void Stream::Impl::post_pending() {
    while (!broken && credits > 0 && !pending.empty()) {
        auto [slot, len, zc] = pending.front();
        uint16_t c = static_cast<uint16_t>(std::min<uint32_t>(owed, 0xffff));
        VIP_DESCRIPTOR *d = &sdesc[slot];
        if (zc) {
            if (rts_posted >= kRtsMax) return; // see the header: the peer's control slots
            detail::encode(sbuf(slot), {Kind::rts, c, kRtsSize});
            detail::encode_rts(sbuf(slot) + kHeaderSize,
                               {reinterpret_cast<uintptr_t>(zc), zc_mh, len});
            fill(d, sbuf(slot), kHeaderSize + kRtsSize, mh);
        } else {
            detail::encode(sbuf(slot), {Kind::data, c, len});
            fill(d, sbuf(slot), kHeaderSize + len, mh);
        }
        VIP_RETURN rc = VipPostSend(vi, d, mh);
        if (rc != VIP_SUCCESS) {
            set_broken(std::make_error_code(std::errc::connection_reset));
            return;
        }
        if (zc) {
            rts_posted++;
            stats.bytes_zcopy += len;
        }
        pending.pop_front();
        owed -= c;
        credits--;
        stats.messages_out++;
        stats.bytes_out += len;
    }
}

bool Stream::Impl::send_control(Kind kind) {
    if (broken || free_ctl.empty()) return false;
    uint32_t i = free_ctl.back();
    uint16_t c = static_cast<uint16_t>(std::min<uint32_t>(owed, 0xffff));
    detail::encode(cbuf(i), {kind, c, 0});
    VIP_DESCRIPTOR *d = &sdesc[nsend + i];
    fill(d, cbuf(i), kHeaderSize, mh);
    VIP_RETURN rc = VipPostSend(vi, d, mh);
    if (rc != VIP_SUCCESS) {
        set_broken(std::make_error_code(std::errc::connection_reset));
        return false;
    }
    free_ctl.pop_back();
    owed -= c;
    stats.control_out++;
    return true;
}

void Stream::Impl::post_control() {
    if (broken) return;
    if (need_fin_ack && send_control(Kind::fin_ack)) need_fin_ack = false;
    while (need_rts_done > 0 && send_control(Kind::rts_done)) need_rts_done--;
    // Batching keeps the peer's unprocessed credit messages within kCtlSlots (see header).
    if (owed >= batch) send_control(Kind::credit);
    if (fin_wanted && !fin_tx && pending.empty() && send_control(Kind::fin)) fin_tx = true;
}

std::error_code Stream::Impl::wait_until(const std::function<bool()> &done, Deadline deadline) {
    for (;;) {
        progress();
        if (done()) return {};
        if (opt.nonblocking) {
            stats.would_block++;
            return std::make_error_code(std::errc::operation_would_block);
        }
        auto now = Clock::now();
        if (now >= deadline) return std::make_error_code(std::errc::timed_out);
        // Sleeping costs a wake-up of ~50 us on this kind of VM: poll the VI briefly first.
        auto spin_end = now + std::chrono::microseconds(opt.spin_us);
        while (opt.spin_us && Clock::now() < spin_end) {
            progress();
            if (done()) {
                stats.spin_wins++;
                return {};
            }
        }
        int ms = -1;
        if (deadline != kNever) {
            auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
            ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
        }
        // Every Done above ran to VIP_NOT_DONE, which re-arms the VI's wait fd.
        pollfd p{vi_fd, POLLIN, 0};
        stats.sleeps++;
        if (poll(&p, 1, ms) < 0 && errno == EINTR)
            return std::make_error_code(std::errc::interrupted);
    }
}

short Stream::Impl::events() const {
    short e = 0;
    if (readable()) e |= POLLIN;
    if (writable()) e |= POLLOUT;
    if (fin_rx) e |= POLLRDHUP;
    if (broken) e |= POLLERR | POLLHUP;
    if (fin_rx && fin_wanted) e |= POLLHUP;
    return e;
}

void Stream::Impl::update_ready() {
    if (ev_fd < 0) return;
    bool ready = (events() & (fd_events | POLLERR | POLLHUP)) != 0;
    if (ready && !ev_set) {
        uint64_t one = 1;
        ssize_t r = ::write(ev_fd, &one, sizeof one);
        (void)r;
        ev_set = true;
    } else if (!ready && ev_set) {
        uint64_t v;
        ssize_t r = ::read(ev_fd, &v, sizeof v);
        (void)r;
        ev_set = false;
    }
}

} // namespace vipl
