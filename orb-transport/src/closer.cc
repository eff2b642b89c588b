// The orderly close of let-go connections, off omniORB's threads (see omnivipl.h).
#include "omnivipl.h"

namespace vipl::orb {

namespace {

// How often a lingering stream is looked at: finished() moves it (no hidden thread),
// and an idle peer's acknowledgement comes only when it calls in.
constexpr auto kLook = std::chrono::milliseconds(1);

} // namespace

Closer &Closer::instance() {
    static Closer closer;
    return closer;
}

void Closer::add(Stream s, Deadline deadline) {
    std::lock_guard lock(mu_);
    if (stop_) { // at exit: this thread waits, as the destructor does for the rest
        s.close(deadline);
        return;
    }
    lingering_.push_back({std::move(s), deadline});
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    cv_.notify_one();
}

void Closer::run() {
    std::unique_lock lock(mu_);
    for (;;) {
        cv_.wait(lock, [&] { return stop_ || !lingering_.empty(); });
        if (stop_) return;
        // Look without the lock: hand-overs go on meanwhile.
        std::vector<Lingering> now;
        now.swap(lingering_);
        lock.unlock();
        auto t = Clock::now();
        for (auto it = now.begin(); it != now.end();) {
            if (it->stream.finished() || t >= it->deadline) {
                it->stream.close(Deadline{}); // taken (at once) or given up (timed out)
                it = now.erase(it);
            } else {
                ++it;
            }
        }
        lock.lock();
        for (Lingering &l : now) lingering_.push_back(std::move(l));
        if (!lingering_.empty()) cv_.wait_for(lock, kLook, [&] { return stop_; });
    }
}

Closer::~Closer() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
    for (Lingering &l : lingering_) l.stream.close(l.deadline);
}

} // namespace vipl::orb
