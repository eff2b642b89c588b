// Closing a stream as a socket closes: at once.  What was written and the end of stream
// go to the transport (finish); once everything is there (the shm ring, the tcp socket)
// the stream is torn down without waiting for the peer: the peer's library delivers what
// its ring or socket holds before it reports the end.  Only what the transport could
// not take yet (a tcp window full) keeps the stream lingering; the interposer finishes
// it inside later calls, and at exit (bounded by VIPL_DB_LINGER_MS).
#include "sock.h"

#include "config.h"
#include "log.h"
#include "real.h"
#include "thread_state.h"

#include <poll.h>

#include <atomic>
#include <mutex>
#include <vector>

namespace vipl::db {

// linger_any's count of lingering streams.
std::atomic<int> detail::g_linger_count{0};

namespace {

struct Lingering {
    vipl::Stream stream;
    Deadline until;
};

std::mutex g_mu;
std::vector<Lingering> *g_list = nullptr; // never freed: streams may linger into exit

std::vector<Lingering> &list() {
    if (!g_list) g_list = new std::vector<Lingering>;
    return *g_list;
}

// Everything written, and the end of stream, is in the transport (or the peer is gone).
bool handed_over(vipl::Stream &s) {
    if (s.finished()) return true;
    std::error_code ec = s.flush(Deadline{});
    return ec != std::errc::timed_out && ec != std::errc::operation_would_block;
}

// Closes what is done or overdue (g_mu held).
void reap_locked(bool all_overdue) {
    auto &v = list();
    Deadline now = Clock::now();
    for (size_t i = 0; i < v.size();) {
        Lingering &l = v[i];
        bool done = handed_over(l.stream);
        if (done || all_overdue || now >= l.until) {
            if (done)
                l.stream.close(Deadline{});
            else
                l.stream.abort(); // the transport never took it: the peer sees a reset
            v[i] = std::move(v.back());
            v.pop_back();
            continue;
        }
        ++i;
    }
    detail::g_linger_count.store(static_cast<int>(v.size()), std::memory_order_relaxed);
}

} // namespace

void linger_stream(vipl::Stream &&s) noexcept {
    Inside in;
    if (!s.is_open()) return;
    if (s.shared_with_others()) {
        // Another process still holds the connection: only our copy goes.
        s.close(Deadline{});
        return;
    }
    s.finish();
    if (handed_over(s)) {
        s.close(Deadline{});
        return;
    }
    try {
        std::lock_guard<std::mutex> g(g_mu);
        list().push_back(
            {std::move(s), Clock::now() + std::chrono::milliseconds(config().linger_ms)});
        detail::g_linger_count.store(static_cast<int>(list().size()), std::memory_order_relaxed);
    } catch (...) {
        s.abort();
    }
}

void linger_reap() noexcept {
    if (!linger_any()) return;
    Inside in;
    std::unique_lock<std::mutex> g(g_mu, std::try_to_lock);
    if (g.owns_lock()) reap_locked(false);
}

void linger_at_exit() noexcept {
    Inside in;
    std::lock_guard<std::mutex> g(g_mu);
    // Wait for the peers together, each stream's descriptor woken by its peer's answer.
    Deadline end = Clock::now() + std::chrono::milliseconds(config().linger_ms);
    while (!list().empty() && Clock::now() < end) {
        reap_locked(false);
        if (list().empty()) break;
        std::vector<pollfd> fds;
        for (Lingering &l : list()) fds.push_back({l.stream.fd(), POLLIN, 0});
        real().poll(fds.data(), fds.size(), 10);
    }
    reap_locked(true);
}

void linger_after_fork_child() noexcept {
    // The parent's lingering streams are the parent's: drop only our copies (another
    // holder, the parent, lives).
    Inside in;
    new (&g_mu) std::mutex();
    if (!g_list) return;
    for (Lingering &l : *g_list) l.stream.close(Deadline{});
    g_list->clear();
    detail::g_linger_count.store(0, std::memory_order_relaxed);
}

} // namespace vipl::db
