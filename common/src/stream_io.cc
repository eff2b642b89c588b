// Stream::Impl: reading, writing, closing.
#include "stream_impl.h"

#include <algorithm>
#include <cstring>

namespace vipl {

using detail::kHeaderSize;

std::size_t Stream::Impl::read(std::span<std::byte> buf, Deadline deadline, std::error_code &ec) {
    ec.clear();
    if (buf.empty()) {
        progress();
        update_ready();
        return 0;
    }
    // A call that may wait as long as an RDMA read takes reads regions into buf itself.
    const bool direct = !opt.nonblocking && deadline == kNever && rdma_ok;
    direct_read = direct;
    auto ready = [&] { return front_ready(direct) || (rq.empty() && fin_rx) || broken; };
    size_t n = 0;
    std::error_code w;
    for (;;) {
        w = wait_until(ready, deadline);
        while (n < buf.size() && !rq.empty()) {
            Msg &m = rq.front();
            if (m.off < m.end) {
                size_t k = std::min<size_t>(buf.size() - n, m.end - m.off);
                std::memcpy(buf.data() + n, bytes(m) + m.off, k);
                m.off += static_cast<uint32_t>(k);
                n += k;
                if (m.off == m.end && (!m.rts || m.taken == m.region.length)) consume_front();
                continue;
            }
            if (!m.rts || m.taken == m.region.length) {
                consume_front();
                continue;
            }
            if (rdma_posted > 0 || broken) break;
            size_t room = buf.size() - n, left = m.region.length - m.taken;
            if (direct && room >= std::min(left, kDirectMin)) {
                size_t k = read_direct(buf.data() + n, std::min(room, left));
                n += k;
                if (k == 0) break;
                // Finished now, not at the next call: the writer waits for its rts-done.
                if (m.taken == m.region.length) consume_front();
                continue;
            }
            start_bounce();
            progress(); // shm moves the piece while posting it
            if (rq.front().off == rq.front().end) break;
        }
        // Nothing yet but a piece of a region in flight: wait for it.
        if (n > 0 || w || broken || rq.empty()) break;
    }
    direct_read = false;
    if (n > 0)
        post_control(); // credits go back as soon as a batch is owed
    else if (w)
        ec = w;
    else if (broken && (!fin_rx || !rq.empty()))
        ec = error ? error : std::make_error_code(std::errc::connection_reset);
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
    auto room = [&] { return writable() || pullable(); };
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
        if (pullable()) {
            pull_regions();
            continue;
        }
        std::error_code w = wait_until(room, deadline);
        if (w) {
            if (n == 0) ec = w;
            break;
        }
    }
    update_ready();
    return n;
}

std::error_code Stream::Impl::close(Deadline deadline) {
    if (!vi) return {};
    std::error_code result;
    if (connected) {
        opt.nonblocking = false;
        // A piece of a region in flight lands in a receive buffer: it must finish before
        // the buffer goes back to the VI.
        while (rdma_posted > 0 && !broken) {
            std::error_code w = wait_until([&] { return broken || rdma_posted == 0; }, deadline);
            if (w && w != std::errc::interrupted) break;
        }
        if (rdma_posted > 0) {
            teardown();
            return broken ? error : std::make_error_code(std::errc::timed_out);
        }
        // Nobody will read any more: drop what is here and what comes, so a peer blocked
        // writing to us cannot keep us from sending our own data.
        discarding = true;
        while (!rq.empty()) consume_front();
        fin_wanted = true;
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
