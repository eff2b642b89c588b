// Stream::Impl: zero-copy writes (the rendezvous), and the reader's RDMA reads of them.
#include "stream_impl.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace vipl {

using detail::kHeaderSize;

namespace {

void fill_read(VIP_DESCRIPTOR *d, uint64_t raddr, VIP_MEM_HANDLE rmh, void *local, uint32_t len,
               VIP_MEM_HANDLE lmh) {
    std::memset(d, 0, sizeof *d);
    d->CS.Control = VIP_CONTROL_OP_RDMAREAD;
    d->CS.SegCount = 2;
    d->CS.Length = len;
    d->DS[0].Remote.Data.AddressBits = raddr;
    d->DS[0].Remote.Handle = rmh;
    d->DS[1].Local.Data.Address = local;
    d->DS[1].Local.Handle = lmh;
    d->DS[1].Local.Length = len;
}

} // namespace

// Why a tail: the write returns at the reader's rts-done for the caller's memory, and
// the reader's next read finds nothing until the writer has woken and offered its next
// write: each write would pay two wake-ups while one side idles (a blocking 1 MiB stream
// moved half of what the VI carries).  With the last 256 KiB staged, the writer copies
// it while the reader reads the rest, and wakes while the reader reads it: the next
// offer is there before the reader asks.  Not where no wake-up is paid: a writer whose
// last wait was won by spinning (the tail's copy then costs more than it saves: 0.9x);
// nor where nothing overlaps: a peer waiting on this CPU (the copy is all cost: 0.8x).
size_t Stream::Impl::zcopy_tail(size_t size) {
    size_t want = std::min<size_t>(kZcopyTail, size / 4);
    if (!want || (opt.spin_us && won_last_)) return 0;
    int peer = -1;
    if (VipQueryViPeerCpu(vi, &peer) == VIP_SUCCESS && peer >= 0 && peer == sched_getcpu())
        return 0;
    return stage_wanted(want) ? want : 0; // makes the stage at the first one
}

std::size_t Stream::Impl::write_zcopy(std::span<const std::byte> buf, std::error_code &ec) {
    State &t = *st;
    VIP_MEM_ATTRIBUTES ma{};
    ma.Ptag = nic->ptag();
    ma.EnableRdmaRead = VIP_TRUE;
    auto *base = const_cast<std::byte *>(buf.data());
    if (!rdma_ok || VipRegisterMem(nic->handle(), base, buf.size(), &ma, &zc_mh) != VIP_SUCCESS)
        return write_copy(buf, kNever, ec); // e.g. the NIC's registration limits
    progress();
    // The tail goes through the stage (see zcopy_tail): the write returns once the reader
    // took the rest from our pages, while it reads the tail.
    const size_t head = buf.size() - zcopy_tail(buf.size());
    size_t n = 0; // bytes offered (queued as rts)
    bool stop = false;
    // Ours: queued staged parts before them are earlier writes' bytes.
    auto unposted = [&] {
        return !t.pending.empty() && t.pending.back().zc && !staged(t.pending.back().zc);
    };
    for (;;) {
        while (!t.broken && !stop && n < head && !t.free_slots.empty()) {
            auto k = static_cast<uint32_t>(std::min<size_t>(kRegionMax, head - n));
            t.pending.push_back({t.free_slots.back(), k, buf.data() + n});
            t.free_slots.pop_back();
            n += k;
        }
        // Every region of ours offered: the tail is copied while the reader reads them.
        if (!t.broken && !stop && n == head && !unposted() && n < buf.size() && stage_room())
            n += stage_write(buf.data() + n, buf.size() - n);
        post_pending();
        if (t.broken || stop || (n == buf.size() && !unposted())) break;
        if (t.credits == 0) t.stats.credit_stalls++;
        // progress() inside the wait posts what credits and kRtsMax allow.
        auto moved = [&] {
            return t.broken || pullable() ||
                   (n < head ? !t.free_slots.empty() : !unposted() && stage_room());
        };
        if (pullable())
            pull_regions();
        else if (wait_until(moved, kNever))
            stop = true; // interrupted: offered regions must finish
    }
    // Regions not offered yet are taken back: they are the tail of the queue.
    while (unposted()) {
        n -= t.pending.back().len;
        t.free_slots.push_back(t.pending.back().slot);
        t.pending.pop_back();
    }
    // The reader takes the offered regions from our pages: wait, whatever signals come.
    // A staged tail offered behind them is no longer ours to wait for.
    while (zcopy_offered() && !t.broken) {
        if (pullable()) pull_regions();
        std::error_code w =
            wait_until([&] { return t.broken || !zcopy_offered() || pullable(); }, kNever);
        (void)w;
    }
    // Broken: the reader's RDMA reads of the region fail from now on (deregistered).
    VipDeregisterMem(nic->handle(), base, zc_mh);
    if (t.broken) {
        t.rts_posted = 0;
        offered_n = 0;
    }
    // Like the copying path: bytes taken are counted, the error comes with the next call.
    if (n == 0 && t.broken)
        ec = t.fin_rx ? std::make_error_code(std::errc::broken_pipe) : t.error;
    else if (n == 0 && stop)
        ec = std::make_error_code(std::errc::interrupted);
    update_ready();
    return n;
}

std::size_t Stream::Impl::read_direct(std::byte *dst, std::size_t len) {
    State &t = *st;
    Msg &m = t.rq.front(); // stays valid: the ring keeps its items where they are
    VIP_MEM_ATTRIBUTES ma{};
    ma.Ptag = nic->ptag();
    VIP_MEM_HANDLE lmh;
    if (VipRegisterMem(nic->handle(), dst, len, &ma, &lmh) != VIP_SUCCESS) {
        start_bounce(); // the program's buffer cannot be registered: pieces then
        return 0;
    }
    size_t done = 0;
    while (done < len && !t.broken) {
        size_t off = post_reads(m, done, len, dst, lmh);
        drain_rdma();
        if (!t.broken) done = off;
    }
    // After drain_rdma no descriptor points into dst (else the region stays registered).
    if (t.rdma_posted == 0) VipDeregisterMem(nic->handle(), dst, lmh);
    if (t.broken) return 0;
    m.taken += static_cast<uint32_t>(done);
    t.stats.bytes_in += done;
    return done;
}

size_t Stream::Impl::post_reads(const Msg &m, size_t off, size_t len, void *dst,
                                VIP_MEM_HANDLE lmh) {
    State &t = *st;
    for (uint32_t k = 0; k < kRdmaSlots && off < len; ++k) {
        // As large as the VI takes: each piece is a system call on shm.
        auto piece = static_cast<uint32_t>(std::min<size_t>(rdma_max, len - off));
        VIP_DESCRIPTOR *d = &sdesc[nsend + kCtlSlots + k];
        fill_read(d, m.region.addr + m.taken + off, m.region.handle,
                  static_cast<uint8_t *>(dst) + off, piece, lmh);
        if (VipPostSend(vi, d, mh) != VIP_SUCCESS) {
            set_broken(std::make_error_code(std::errc::connection_reset));
            break;
        }
        t.rdma_posted++;
        off += piece;
    }
    return off;
}

bool Stream::Impl::pullable() const {
    const State &t = *st;
    if (nonblocking.load(std::memory_order_relaxed) || t.broken) return false;
    for (uint32_t i = 0; i < t.rq.size(); ++i)
        if (t.rq[i].rts && t.rq[i].taken < t.rq[i].region.length) return true;
    return false;
}

void Stream::Impl::pull_regions() {
    drain_rdma(); // a piece in flight becomes part of what is pulled
    // No piece may start meanwhile (progress() would fetch into the front's buffer).
    struct NoBounce {
        bool &flag, saved;
        ~NoBounce() { flag = saved; }
    } guard{direct_read, direct_read};
    direct_read = true;
    State &t = *st;
    if (pulled.empty()) pulled.resize(nrecv);
    for (uint32_t i = 0; i < t.rq.size(); ++i) {
        Msg &m = t.rq[i];
        if (t.broken) return;
        if (!m.rts || m.taken == m.region.length) continue;
        size_t have = m.end - m.off, rest = m.region.length - m.taken;
        std::vector<uint8_t> h(have + rest);
        std::memcpy(h.data(), bytes(m) + m.off, have);
        VIP_MEM_ATTRIBUTES ma{};
        ma.Ptag = nic->ptag();
        VIP_MEM_HANDLE lmh;
        if (VipRegisterMem(nic->handle(), h.data(), h.size(), &ma, &lmh) != VIP_SUCCESS) {
            set_broken(std::make_error_code(std::errc::not_enough_memory));
            return;
        }
        size_t off = 0;
        while (off < rest && !t.broken) {
            off = post_reads(m, off, rest, h.data() + have, lmh);
            drain_rdma();
        }
        if (t.rdma_posted == 0) VipDeregisterMem(nic->handle(), h.data(), lmh);
        if (t.broken) {
            // A descriptor may still point into h: it lives as long as the stream.
            if (t.rdma_posted > 0) leaked.push_back(std::move(h));
            return;
        }
        t.stats.bytes_in += rest;
        m.off = 0;
        m.end = static_cast<uint32_t>(h.size());
        pulled[m.slot] = std::move(h);
        m.taken = m.region.length;
        m.done_sent = true;
        t.need_rts_done++;
    }
    post_control();
}

void Stream::Impl::start_bounce() {
    State &t = *st;
    Msg &m = t.rq.front();
    auto piece = static_cast<uint32_t>(std::min<uint32_t>(payload, m.region.length - m.taken));
    VIP_DESCRIPTOR *d = &sdesc[nsend + kCtlSlots];
    fill_read(d, m.region.addr + m.taken, m.region.handle, rbuf(m.slot) + kHeaderSize, piece, mh);
    if (VipPostSend(vi, d, mh) != VIP_SUCCESS) {
        set_broken(std::make_error_code(std::errc::connection_reset));
        return;
    }
    t.rdma_posted = 1;
    t.bounce_len = piece;
}

void Stream::Impl::drain_rdma() {
    State &t = *st;
    bool nb = nonblocking.load(std::memory_order_relaxed);
    nonblocking.store(false, std::memory_order_relaxed);
    while (t.rdma_posted > 0 && !t.broken) {
        std::error_code w = wait_until([&] { return t.broken || t.rdma_posted == 0; }, kNever);
        (void)w;
    }
    nonblocking.store(nb, std::memory_order_relaxed);
    if (t.rdma_posted > 0) {
        // A disconnect completes (flushes) every posted descriptor.
        VipDisconnect(vi);
        for (int i = 0; i < 2000 && t.rdma_posted > 0; ++i) {
            progress();
            if (t.rdma_posted > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
}

} // namespace vipl
