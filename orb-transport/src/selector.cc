// The server loop over vipl connections (omniORB's SocketCollection contract).
//
// Callbacks run with the selector's lock held, as omniORB's own collection does: a
// connection cannot be destroyed under a callback.  Lock order: selector, then a
// connection's stream lock (readable_now()); the stream lock is never held while taking
// the selector's.
#include "omnivipl.h"

#include <algorithm>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace vipl::orb {

Selector::Selector() : wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

Selector::~Selector() {
    if (wake_fd_ >= 0) close(wake_fd_);
}

Selector::Entry *Selector::find(Connection *c) {
    for (Entry &e : entries_)
        if (e.conn == c) return &e;
    return nullptr;
}

void Selector::add(Connection *c) {
    std::lock_guard lock(mu_);
    entries_.push_back(Entry{c});
}

void Selector::remove(Connection *c) {
    std::lock_guard lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->conn == c) {
            entries_.erase(it);
            break;
        }
    std::erase(polled_, c);
    peek_cv_.notify_all();
}

bool Selector::empty() {
    std::lock_guard lock(mu_);
    return entries_.empty();
}

void Selector::wake() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
}

void Selector::set_selectable(Connection *c, int now, bool data_in_buffer) {
    std::lock_guard lock(mu_);
    Entry *e = find(c);
    if (!e || (now == 2 && !e->selectable)) return;
    e->selectable = true;
    e->data_in_buffer |= data_in_buffer;
    changed_ = true;
    // now == 0 is left to the next scan: waking the loop on every call costs a context
    // switch per request in thread-pool mode.
    if (now || e->data_in_buffer || idle_ == 0) {
        force_scan_ = true;
        wake();
    }
    peek_cv_.notify_all();
}

void Selector::clear_selectable(Connection *c) {
    std::lock_guard lock(mu_);
    if (Entry *e = find(c)) {
        e->selectable = false;
        e->polled = false;
    }
}

bool Selector::is_selectable(Connection *c) {
    std::lock_guard lock(mu_);
    Entry *e = find(c);
    return e && e->selectable;
}

bool Selector::select(omni::giopConnection::notifyReadable_t func, void *cookie, int extra_fd) {
    std::vector<pollfd> fds;
    std::vector<Connection *> conns;
    std::vector<bool> ready; // per conns: found ready before the poll
    int timeout;
    {
        std::lock_guard lock(mu_);
        auto now = Clock::now();
        if (force_scan_ || now >= next_scan_) {
            force_scan_ = false;
            next_scan_ = now + std::chrono::milliseconds(kScanMs);
            polled_.clear();
            for (Entry &e : entries_) {
                e.polled = false;
                if (!e.selectable) continue;
                if (e.data_in_buffer) {
                    e.selectable = e.data_in_buffer = false;
                    func(cookie, e.conn);
                    continue;
                }
                e.polled = true;
                polled_.push_back(e.conn);
            }
            changed_ = false;
            timeout = idle_ > 0 ? kScanMs : -1;
        } else {
            timeout = ms_left(next_scan_);
        }
        fds.push_back({wake_fd_, POLLIN, 0});
        if (extra_fd >= 0) fds.push_back({extra_fd, POLLIN, 0});
        for (Connection *c : polled_) {
            Entry *e = find(c);
            if (!e || !e->polled || !e->selectable) continue;
            // Its fd is quiet until armed; one found ready needs no wait.
            bool now = c->ready_or_armed(POLLIN);
            if (now) timeout = 0;
            fds.push_back({c->fd(), POLLIN, 0});
            conns.push_back(c);
            ready.push_back(now);
        }
    }

    int n = poll(fds.data(), fds.size(), timeout);
    bool extra_ready = false;
    std::lock_guard lock(mu_);
    bool any_ready = std::find(ready.begin(), ready.end(), true) != ready.end();
    if (n <= 0 && !any_ready) {
        if (n == 0 && idle_ > 0) --idle_;
        return false;
    }
    idle_ = kIdleScans;
    size_t first_conn = 1;
    if (fds[0].revents) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = read(wake_fd_, &v, sizeof v);
    }
    if (extra_fd >= 0) {
        extra_ready = fds[1].revents != 0;
        first_conn = 2;
    }
    for (size_t i = first_conn; i < fds.size(); ++i) {
        if (!fds[i].revents && !ready[i - first_conn]) continue;
        Connection *c = conns[i - first_conn];
        Entry *e = find(c);
        if (!e || !e->polled || !e->selectable) continue;
        if (!c->is_shutdown() && !c->readable_now()) continue; // a send completion, a credit
        e->polled = false;
        std::erase(polled_, c);
        if (e->peeking) {
            // The peeking thread takes it; dispatching too would give one of them nothing.
            e->peek_go = true;
        } else {
            e->selectable = e->data_in_buffer = false;
            func(cookie, c);
        }
    }
    return extra_ready;
}

bool Selector::peek(Connection *c) {
    std::unique_lock lock(mu_);
    auto deadline = Clock::now() + std::chrono::milliseconds(kScanMs);
    Entry *e;
    for (;;) {
        e = find(c);
        if (!e) return false;
        if (e->selectable && !e->peeking) break;
        if (peek_cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
            e = find(c);
            if (e && e->selectable && !e->peeking) break;
            return false;
        }
    }
    if (e->data_in_buffer) {
        e->data_in_buffer = e->selectable = e->polled = false;
        return true;
    }
    e->peeking = true;
    e->peek_go = false;
    lock.unlock();

    auto ready = [&] { return c->readable_now() || c->is_shutdown(); };
    bool got = ready();
    if (!got) {
        Spin spin;
        spin.add(c->spin_budget());
        got = spin.run(ready, deadline);
        spin.report(*c, got, got);
    }
    while (!got) {
        int left = ms_left(deadline);
        if (left == 0) break;
        if (c->wait(left)) got = c->readable_now() || c->is_shutdown();
    }

    lock.lock();
    bool ret = false;
    if ((e = find(c))) {
        ret = e->data_in_buffer || (got && e->selectable) || e->peek_go;
        if (ret) {
            e->selectable = e->data_in_buffer = e->polled = false;
            std::erase(polled_, c);
        }
        e->peeking = false;
    }
    peek_cv_.notify_all();
    return ret;
}

} // namespace vipl::orb
