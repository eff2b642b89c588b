// One Stream as a giopConnection.  omniORB may Send on a connection while another of its
// threads is blocked in Recv on it, but a Stream is single-threaded: every stream call
// takes mu_, and nobody sleeps holding it.  The stream is non-blocking; a caller that
// must wait spins as the stream's spin policy allows (vipl::Spin over spin_budget()),
// then sleeps in poll() on the stream's fd and the connection's shutdown eventfd, and
// tries again.
#include "omnivipl.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace vipl::orb {

int ms_until(const omni_time_t &deadline) {
    if (!deadline) return -1;
    omni_time_t now;
    omni_thread::get_time(now);
    if (deadline <= now) return 0;
    long long ns =
        (static_cast<long long>(deadline.s) - static_cast<long long>(now.s)) * 1000000000LL +
        (static_cast<long long>(deadline.ns) - static_cast<long long>(now.ns));
    return static_cast<int>((ns + 999999) / 1000000);
}

namespace {

bool would_block(const std::error_code &ec) {
    return ec == std::errc::operation_would_block;
}

} // namespace

Connection::Connection(Stream stream, std::shared_ptr<Selector> selector, std::string myaddr,
                       std::string peeraddr)
    : stream_(std::move(stream)), fd_(stream_.wait_fd()),
      shutdown_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      progress_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)), selector_(std::move(selector)),
      my_(std::move(myaddr)), peer_(std::move(peeraddr)) {
    stream_.set_nonblocking(true);
    selector_->add(this);
}

Connection::~Connection() {
    selector_->remove(this);
    {
        std::lock_guard lock(mu_);
        // The orderly close, ended by the Closer: this returns at once.
        stream_.finish();
        if (stream_.finished())
            stream_.close(Deadline{});
        else
            Closer::instance().add(std::move(stream_), deadline_in(options().stream.linger));
    }
    if (shutdown_fd_ >= 0) close(shutdown_fd_);
    if (progress_fd_ >= 0) close(progress_fd_);
}

template <typename Op>
auto Connection::locked(Op op, bool sending) {
    std::lock_guard lock(mu_);
    auto r = op();
    if (send_waiting_ && !sending) {
        uint64_t one = 1;
        [[maybe_unused]] ssize_t n = write(progress_fd_, &one, sizeof one);
    }
    return r;
}

bool Connection::ready_or_armed(short want, bool sending) {
    return !locked([&] { return stream_.arm_to_sleep(want); }, sending);
}

bool Connection::wait(int timeout_ms) {
    if (ready_or_armed(POLLIN)) return true;
    pollfd fds[2] = {{fd_, POLLIN, 0}, {shutdown_fd_, POLLIN, 0}};
    return poll(fds, 2, timeout_ms) > 0;
}

bool Connection::readable_now() {
    // events() takes what arrived first; an error or the end reads as POLLIN too.
    short ev = locked([&] { return stream_.events(); }, false);
    return (ev & (POLLIN | POLLERR | POLLHUP)) != 0;
}

SpinBudget Connection::spin_budget() const {
    return stream_.spin_budget();
}

void Connection::spin_outcome(bool won) {
    stream_.spin_outcome(won);
}

template <typename Op>
int Connection::transfer(const omni_time_t &deadline, bool sending, Op op) {
    std::error_code ec;
    size_t n = 0;
    // One look: the operation under mu_; true once it did not find the stream empty/full.
    auto look = [&] {
        ec.clear();
        n = locked(
            [&] {
                size_t got = op(ec);
                if (sending) send_waiting_ = ec == std::errc::operation_would_block;
                return got;
            },
            sending);
        return !would_block(ec);
    };
    auto result = [&] {
        if (ec) return -1;
        return n == 0 ? -1 : static_cast<int>(n); // 0: the peer closed
    };
    for (bool spun = false;;) {
        if (is_shutdown()) return -1;
        if (look()) return result();
        if (!spun) {
            // Once per call, before the first sleep.
            spun = true;
            Spin spin;
            spin.add(spin_budget());
            int ms = ms_until(deadline);
            bool got = spin.run([&] { return is_shutdown() || look(); },
                                ms < 0 ? kNever : Clock::now() + std::chrono::milliseconds(ms));
            spin.report(*this, got, got);
            if (got) return is_shutdown() ? -1 : result();
        }
        int t = ms_until(deadline);
        if (t == 0) return 0;
        if (ready_or_armed(sending ? POLLOUT : POLLIN, sending)) continue; // look again
        pollfd fds[3] = {{fd_, POLLIN, 0}, {shutdown_fd_, POLLIN, 0}, {progress_fd_, POLLIN, 0}};
        int ready = poll(fds, sending ? 3 : 2, t);
        if (sending && fds[2].revents) {
            uint64_t v;
            [[maybe_unused]] ssize_t r = read(progress_fd_, &v, sizeof v);
        }
        if (ready == 0 && ms_until(deadline) == 0) return 0;
    }
}

int Connection::Send(void *buf, size_t sz, const omni_time_t &deadline) {
    auto data = std::span(static_cast<const std::byte *>(buf), sz);
    return transfer(deadline, true, [&](std::error_code &ec) { return stream_.write(data, ec); });
}

int Connection::Recv(void *buf, size_t sz, const omni_time_t &deadline) {
    auto data = std::span(static_cast<std::byte *>(buf), sz);
    return transfer(deadline, false, [&](std::error_code &ec) { return stream_.read(data, ec); });
}

void Connection::Shutdown() {
    shutdown_.store(true, std::memory_order_release);
    {
        std::lock_guard lock(mu_);
        std::error_code ec;
        stream_.shutdown_write(ec);
    }
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(shutdown_fd_, &one, sizeof one);
}

void Connection::setSelectable(int now, CORBA::Boolean data_in_buffer) {
    selector_->set_selectable(this, now, data_in_buffer);
}

void Connection::clearSelectable() {
    selector_->clear_selectable(this);
}

// Whether the connection can be watched at all (omniORB's select() may run out of
// fd_set room), not whether it is watched now: ours always can.
CORBA::Boolean Connection::isSelectable() {
    return fd_ >= 0;
}

CORBA::Boolean Connection::Peek() {
    return selector_->peek(this);
}

} // namespace vipl::orb
