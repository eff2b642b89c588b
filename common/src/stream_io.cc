// Stream::Impl: reading, writing, closing.
#include "stream_impl.h"

#include <algorithm>
#include <cstring>

namespace vipl {

using detail::kHeaderSize;

namespace {

std::error_code reset() {
    return std::make_error_code(std::errc::connection_reset);
}

} // namespace

std::size_t Stream::Impl::read(std::span<std::byte> buf, Deadline deadline, std::error_code &ec,
                               bool peek) {
    State &t = *st;
    ec.clear();
    if (t.poisoned) {
        ec = reset();
        return 0;
    }
    if (buf.empty()) {
        progress();
        update_ready();
        return 0;
    }
    // A call that may wait as long as an RDMA read takes reads regions into buf itself
    // (private streams only: rdma_ok).
    const bool direct =
        !peek && !nonblocking.load(std::memory_order_relaxed) && deadline == kNever && rdma_ok;
    if (!shared) direct_read = direct;
    auto ready = [&] { return front_ready(direct) || (t.rq.empty() && t.fin_rx) || t.broken; };
    // An rts whose bytes were all read, or a message a peek found empty.
    auto exhausted = [&](const Msg &m) {
        return m.off == m.end && (!m.rts || m.taken == m.region.length);
    };
    size_t n = 0;
    std::error_code w;
    for (;;) {
        w = wait_until(ready, deadline, true);
        // A waiter's look may have left arrivals in the VI (progress): once the stream
        // broke, what is left (bytes, the peer's fin) decides what this read returns.
        if (t.broken && t.rq.empty()) progress();
        if (t.poisoned) break;
        if (peek) {
            while (!t.rq.empty() && exhausted(t.rq.front())) consume_front();
            // Whole messages in line, up to the first region still to be fetched.
            for (uint32_t i = 0; i < t.rq.size() && n < buf.size(); ++i) {
                const Msg &m = t.rq[i];
                size_t k = std::min<size_t>(buf.size() - n, m.end - m.off);
                std::memcpy(buf.data() + n, bytes(m) + m.off, k);
                n += k;
                if (m.rts && m.taken < m.region.length) break;
            }
            if (n > 0 || w || t.broken || t.rq.empty()) break;
            continue;
        }
        while (n < buf.size() && !t.rq.empty()) {
            Msg &m = t.rq.front();
            if (m.off < m.end) {
                size_t k = std::min<size_t>(buf.size() - n, m.end - m.off);
                std::memcpy(buf.data() + n, bytes(m) + m.off, k);
                m.off += static_cast<uint32_t>(k);
                n += k;
                if (exhausted(m)) consume_front();
                continue;
            }
            if (exhausted(m)) {
                consume_front();
                continue;
            }
            if (t.rdma_posted > 0 || t.broken) break;
            size_t room = buf.size() - n, left = m.region.length - m.taken;
            if (direct && room >= std::min(left, kDirectMin)) {
                size_t k = read_direct(buf.data() + n, std::min(room, left));
                n += k;
                if (k == 0) break;
                // Finished now, not at the next call: the writer waits for its rts-done
                // (a staged writer to refill the part while we read the next).
                if (m.taken == m.region.length) {
                    consume_front();
                    post_control();
                }
                continue;
            }
            start_bounce();
            progress(); // shm moves the piece while posting it
            if (t.rq.front().off == t.rq.front().end) break;
        }
        // Nothing yet but a piece of a region in flight: wait for it.
        if (n > 0 || w || t.broken || t.rq.empty()) break;
    }
    if (!shared) direct_read = false;
    if (t.poisoned)
        ec = reset();
    else if (n > 0 && !peek)
        post_control(); // credits go back as soon as a batch is owed
    else if (n == 0 && w)
        ec = w;
    else if (n == 0 && t.broken && (!t.fin_rx || !t.rq.empty()))
        ec = t.error ? t.error : reset();
    // Nothing to read after a look (a deadline that passed, or none allowed at all).
    if (!peek && (ec == std::errc::operation_would_block || ec == std::errc::timed_out))
        would_block_at = ticks();
    update_ready();
    return n;
}

std::size_t Stream::Impl::write(std::span<const std::byte> buf, Deadline deadline,
                                std::error_code &ec) {
    ec.clear();
    if (st->poisoned) {
        ec = reset();
        return 0;
    }
    if (st->fin_wanted || st->peer_stopped) {
        ec = std::make_error_code(std::errc::broken_pipe);
        return 0;
    }
    // Zero copy only where the write may wait as long as the peer takes to read the
    // caller's pages: no deadline, and blocking; never to a peer that asked for none
    // (a shareable stream), never from a shareable stream (opt.zcopy_threshold is 0).
    if (!nonblocking.load(std::memory_order_relaxed) && deadline == kNever &&
        opt.zcopy_threshold > 0 && buf.size() >= opt.zcopy_threshold) {
        // Whether the peer takes rts is in its first message (the credit grant).
        std::error_code w = wait_until([&] { return st->heard || st->broken; }, kNever);
        if (w) {
            ec = w;
            return 0;
        }
        if (!st->peer_no_rts) return write_zcopy(buf, ec);
    }
    return write_copy(buf, deadline, ec);
}

std::size_t Stream::Impl::write_copy(std::span<const std::byte> buf, Deadline deadline,
                                     std::error_code &ec) {
    State &t = *st;
    // Without write_looks, a write that can go out at once (a free buffer, a credit for
    // it) takes nothing first: what arrived waits for the next read or wait.
    bool looked = drained_at && ticks() - drained_at < kLookedTicks;
    drained_at = 0;
    if ((opt.write_looks && !looked) || t.broken || t.free_slots.empty() ||
        t.credits <= t.pending.size())
        progress();
    // Holders of a shareable stream may write at once: a blocking write that fits the
    // send buffers is copied in one go, once there is room for all of it, so that its
    // bytes stay together in the stream.
    // Without holding back, room means credits, which the peer returns in batches: a
    // write waiting for more than it may ever get at once would wait for ever, so such
    // writes go in parts (as a socket's large writes may).
    const bool whole = shared && opt.hold_back && !nonblocking.load(std::memory_order_relaxed) &&
                       buf.size() <= static_cast<size_t>(nsend) * payload;
    size_t n = 0;
    bool staging = false; // the bytes left go through the stage (stream_stage.cc)
    auto can = [&] {
        return t.broken || t.fin_wanted ||
               (staging ? stage_room()
                : whole ? room() >= buf.size() - n
                        : writable()) ||
               pullable();
    };
    for (;;) {
        if (t.broken) {
            if (n == 0) ec = t.fin_rx ? std::make_error_code(std::errc::broken_pipe) : t.error;
            break;
        }
        if (t.fin_wanted || t.peer_stopped) { // shut down meanwhile (a holder, the peer)
            if (n == 0) ec = std::make_error_code(std::errc::broken_pipe);
            break;
        }
        // Coalesce into the last buffer not yet sent, then take fresh ones.
        bool go = !whole || room() >= buf.size() - n || inline_fits(buf.size() - n);
        while (go && n < buf.size()) {
            staging = stage_wanted(buf.size() - n);
            if (staging) {
                if (!stage_room()) break;
                n += stage_write(buf.data() + n, buf.size() - n);
                continue;
            }
            // Nothing queued before it and a credit: straight from the caller's buffer.
            // A whole write goes inline only as one message (its bytes stay together).
            size_t k = std::min<size_t>(inline_payload, buf.size() - n);
            if (inline_payload && inline_fits(whole ? buf.size() - n : k)) {
                if (send_inline(buf.data() + n, k)) {
                    n += k;
                    continue;
                }
                if (t.broken) break;
                // The transport is full: a whole write waits for room for all of it.
                if (whole && room() < buf.size() - n) break;
            }
            if (!t.pending.empty() && !t.pending.back().zc && t.pending.back().len < payload) {
                Out &o = t.pending.back();
                size_t k = std::min<size_t>(payload - o.len, buf.size() - n);
                std::memcpy(sbuf(o.slot) + kHeaderSize + o.len, buf.data() + n, k);
                o.len += static_cast<uint32_t>(k);
                n += k;
            } else if (!t.free_slots.empty() && (opt.hold_back || t.credits > t.pending.size())) {
                t.pending.push_back({t.free_slots.back(), 0});
                t.free_slots.pop_back();
            } else {
                break;
            }
        }
        post_pending();
        if (n == buf.size()) break;
        if (t.credits == 0) t.stats.credit_stalls++;
        if (pullable()) {
            pull_regions();
            continue;
        }
        std::error_code w = wait_until(can, deadline);
        if (w) {
            if (n == 0) ec = w;
            break;
        }
    }
    update_ready();
    return n;
}

void Stream::Impl::switch_out() {
    st->switch_out = true;
    shutdown_write();
}

void Stream::Impl::shutdown_write() {
    st->fin_wanted = true;
    changed(); // a writer of another holder waiting for room must see it
    progress();
    update_ready();
}

std::error_code Stream::Impl::close(Deadline deadline) {
    if (!vi) {
        release_local();
        return {};
    }
    lock();
    // Another holder keeps the stream: only this process's copy goes.
    if (shared && shared_with_others()) {
        leave();
        return {};
    }
    State &t = *st;
    std::error_code result;
    if (t.poisoned) {
        result = reset();
    } else if (t.connected) {
        nonblocking.store(false, std::memory_order_relaxed);
        // A piece of a region in flight lands in a receive buffer: it must finish before
        // the buffer goes back to the VI.
        while (t.rdma_posted > 0 && !t.broken) {
            std::error_code w =
                wait_until([&] { return t.broken || t.rdma_posted == 0; }, deadline);
            if (w && w != std::errc::interrupted) break;
        }
        if (t.rdma_posted > 0) {
            result = t.broken ? t.error : std::make_error_code(std::errc::timed_out);
            unlock();
            teardown();
            return result;
        }
        // Nobody will read any more: drop what is here and what comes, so a peer blocked
        // writing to us cannot keep us from sending our own data.
        t.discarding = true;
        while (!t.rq.empty()) consume_front();
        t.fin_wanted = true;
        // The peer acks the fin as it takes it, maybe before it read the staged parts
        // offered ahead of it: those must stay until their rts-dones.
        for (;;) {
            std::error_code w = wait_until(
                [&] { return t.broken || (t.fin_tx && t.fin_ack_rx && t.rts_posted == 0); },
                deadline);
            if (w == std::errc::interrupted) continue;
            result = w;
            break;
        }
        // A peer that finished too may disconnect before its fin-ack reaches us.
        if (!result && !(t.fin_tx && t.fin_ack_rx && t.rts_posted == 0) && !(t.broken && t.fin_rx))
            result = t.error ? t.error : reset();
    }
    unlock();
    teardown();
    return result;
}

void Stream::Impl::shutdown_read() {
    State &t = *st;
    // What is here and what comes is dropped; the peer learns that its writes fail.
    t.discarding = true;
    while (!t.rq.empty()) consume_front();
    t.stop_wanted = true;
    progress();
    update_ready();
}

void Stream::Impl::finish() {
    State &t = *st;
    if (t.poisoned || !t.connected || t.broken) return;
    // As close(): nobody reads any more, so a peer blocked writing to us cannot keep us
    // from sending our own data; what was written goes, then the end of stream.
    t.discarding = true;
    while (!t.rq.empty()) consume_front();
    t.fin_wanted = true;
    changed();
    progress();
}

bool Stream::Impl::finished() {
    State &t = *st;
    if (t.poisoned || !t.connected || t.broken) return true;
    // A piece of a region in flight must land before the buffers go (close() waits).
    progress();
    return t.broken || (t.fin_tx && t.fin_ack_rx && t.rdma_posted == 0 && t.rts_posted == 0);
}

void Stream::Impl::abort() noexcept {
    if (!vi) {
        release_local();
        return;
    }
    lock();
    // The connection ends for every holder: the peer gets connection_reset.
    set_broken(reset());
    VipDisconnect(vi);
    if (shared && shared_with_others()) {
        leave();
        return;
    }
    unlock();
    teardown();
}

} // namespace vipl
