// Stream::Impl: reading, writing, closing.
#include "stream_impl.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace vipl {

using detail::kHeaderSize;

std::size_t Stream::Impl::read(std::span<std::byte> buf, Deadline deadline, std::error_code &ec) {
    ec.clear();
    if (buf.empty()) {
        progress();
        update_ready();
        return 0;
    }
    std::error_code w = wait_until([&] { return !rq.empty() || fin_rx || broken; }, deadline);
    size_t n = 0;
    while (n < buf.size() && !rq.empty()) {
        Msg &m = rq.front();
        size_t k = std::min<size_t>(buf.size() - n, m.end - m.off);
        std::memcpy(buf.data() + n, rbuf(m.slot) + m.off, k);
        m.off += static_cast<uint32_t>(k);
        n += k;
        if (m.off == m.end) consume_front();
    }
    if (n > 0)
        post_control(); // credits go back as soon as a batch is owed
    else if (w)
        ec = w;
    else if (!fin_rx && broken)
        ec = error;
    update_ready();
    return n;
}

std::size_t Stream::Impl::write(std::span<const std::byte> buf, Deadline deadline,
                                std::error_code &ec) {
    ec.clear();
    if (fin_wanted) {
        ec = std::make_error_code(std::errc::broken_pipe);
        return 0;
    }
    // Zero copy only where the write may wait as long as the peer takes to read the
    // caller's pages: no deadline, and blocking.
    if (!opt.nonblocking && deadline == kNever && opt.zcopy_threshold > 0 &&
        buf.size() >= opt.zcopy_threshold)
        return write_zcopy(buf, ec);
    return write_copy(buf, deadline, ec);
}

std::size_t Stream::Impl::write_copy(std::span<const std::byte> buf, Deadline deadline,
                                     std::error_code &ec) {
    progress();
    size_t n = 0;
    auto room = [&] { return writable(); };
    for (;;) {
        if (broken) {
            if (n == 0) ec = fin_rx ? std::make_error_code(std::errc::broken_pipe) : error;
            break;
        }
        // Coalesce into the last buffer not yet sent, then take fresh ones.
        while (n < buf.size()) {
            if (!pending.empty() && !pending.back().zc && pending.back().len < payload) {
                Out &o = pending.back();
                size_t k = std::min<size_t>(payload - o.len, buf.size() - n);
                std::memcpy(sbuf(o.slot) + kHeaderSize + o.len, buf.data() + n, k);
                o.len += static_cast<uint32_t>(k);
                n += k;
            } else if (!free_slots.empty()) {
                pending.push_back({free_slots.back(), 0});
                free_slots.pop_back();
            } else {
                break;
            }
        }
        post_pending();
        if (n == buf.size()) break;
        if (credits == 0) stats.credit_stalls++;
        std::error_code w = wait_until(room, deadline);
        if (w) {
            if (n == 0) ec = w;
            break;
        }
    }
    update_ready();
    return n;
}

std::size_t Stream::Impl::write_zcopy(std::span<const std::byte> buf, std::error_code &ec) {
    const size_t head = buf.size();
    VIP_MEM_ATTRIBUTES ma{};
    ma.Ptag = nic->ptag();
    auto *base = const_cast<std::byte *>(buf.data());
    if (VipRegisterMem(nic->handle(), base, head, &ma, &zc_mh) != VIP_SUCCESS) {
        return write_copy(buf, kNever, ec); // e.g. the NIC's registration limits
    }
    progress();
    size_t n = 0; // bytes queued from buf
    bool stop = false;
    for (;;) {
        while (!broken && !stop && n < head && !free_slots.empty()) {
            auto k = static_cast<uint32_t>(std::min<size_t>(payload, head - n));
            pending.push_back({free_slots.back(), k, buf.data() + n});
            free_slots.pop_back();
            n += k;
        }
        post_pending();
        // Done once every piece is posted (progress() inside the wait posts them too).
        auto unposted = [&] { return !pending.empty() && pending.back().zc; };
        auto moved = [&] { return broken || (n < head ? !free_slots.empty() : !unposted()); };
        if (broken || stop || (n == head && !unposted())) break;
        if (credits == 0) stats.credit_stalls++;
        if (wait_until(moved, kNever)) stop = true; // interrupted: what was posted must complete
    }
    // Messages not posted yet (no credit) are taken back: they are the tail of the queue.
    while (!pending.empty() && pending.back().zc) {
        n -= pending.back().len;
        free_slots.push_back(pending.back().slot);
        pending.pop_back();
    }
    // The peer reads the posted ones from our pages: wait, whatever signals come.
    while (zc_posted > 0 && !broken) {
        std::error_code w = wait_until([&] { return broken || zc_posted == 0; }, kNever);
        (void)w;
    }
    if (zc_posted > 0) {
        // Broken: a disconnect completes (flushes) every posted descriptor.
        VipDisconnect(vi);
        for (int i = 0; i < 2000 && zc_posted > 0; ++i) {
            progress();
            if (zc_posted > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    // A descriptor still pointing into the region keeps it registered (a leak, not a
    // use of freed pages).
    if (zc_posted == 0) VipDeregisterMem(nic->handle(), base, zc_mh);
    // Like the copying path: bytes taken are counted, the error comes with the next call.
    if (n == 0 && broken)
        ec = fin_rx ? std::make_error_code(std::errc::broken_pipe) : error;
    else if (n == 0 && stop)
        ec = std::make_error_code(std::errc::interrupted);
    update_ready();
    return n;
}

std::error_code Stream::Impl::close(Deadline deadline) {
    if (!vi) return {};
    std::error_code result;
    if (connected) {
        // Nobody will read any more: drop what is here and what comes, so a peer blocked
        // writing to us cannot keep us from sending our own data.
        discarding = true;
        while (!rq.empty()) consume_front();
        fin_wanted = true;
        opt.nonblocking = false;
        for (;;) {
            std::error_code w =
                wait_until([&] { return broken || (fin_tx && fin_ack_rx); }, deadline);
            if (w == std::errc::interrupted) continue;
            result = w;
            break;
        }
        // A peer that finished too may disconnect before its fin-ack reaches us.
        if (!result && !(fin_tx && fin_ack_rx) && !(broken && fin_rx))
            result = error ? error : std::make_error_code(std::errc::connection_reset);
    }
    teardown();
    return result;
}

} // namespace vipl
