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
    progress();
    size_t n = 0;
    auto room = [&] {
        return broken || !free_slots.empty() ||
               (!pending.empty() && pending.back().second < payload);
    };
    for (;;) {
        if (broken) {
            if (n == 0) ec = fin_rx ? std::make_error_code(std::errc::broken_pipe) : error;
            break;
        }
        // Coalesce into the last buffer not yet sent, then take fresh ones.
        while (n < buf.size()) {
            if (!pending.empty() && pending.back().second < payload) {
                auto &[slot, len] = pending.back();
                size_t k = std::min<size_t>(payload - len, buf.size() - n);
                std::memcpy(sbuf(slot) + kHeaderSize + len, buf.data() + n, k);
                len += static_cast<uint32_t>(k);
                n += k;
            } else if (!free_slots.empty()) {
                pending.emplace_back(free_slots.back(), 0);
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
