// Stream: the public handle, and connecting.
#include "ends.h"
#include "stream_impl.h"
#include "vipl/error.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <utility>

namespace vipl {

namespace {

std::error_code not_connected() {
    return std::make_error_code(std::errc::not_connected);
}

} // namespace

// VIPL timeouts are milliseconds; a deadline already passed still tries once.
VIP_ULONG timeout_ms(Deadline deadline) {
    int ms = ms_left(deadline);
    return ms < 0 ? VIP_INFINITE : static_cast<VIP_ULONG>(ms);
}

Stream::Stream() noexcept = default;
Stream::Stream(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Stream::Stream(Stream &&) noexcept = default;

Stream &Stream::operator=(Stream &&other) noexcept {
    if (this != &other) {
        if (impl_) impl_->close(deadline_in(impl_->opt.linger));
        impl_ = std::move(other.impl_);
    }
    return *this;
}

Stream::~Stream() {
    if (impl_) impl_->close(deadline_in(impl_->opt.linger));
}

Stream Stream::connect(std::string_view uri, Deadline deadline, std::error_code &ec,
                       const StreamOptions &options) {
    Uri u = Uri::parse(uri, ec);
    if (ec) return {};
    return connect(u, deadline, ec, options);
}

Stream Stream::connect(const Uri &uri, Deadline deadline, std::error_code &ec,
                       const StreamOptions &options) {
    if (!uri.has_discriminator() || options.buffer_size == 0 ||
        options.buffer_size > detail::kMaxBufferSize) {
        ec = std::make_error_code(std::errc::invalid_argument);
        return {};
    }
    auto nic =
        detail::Nic::open(options.device.empty() ? uri.connect_device() : options.device, ec);
    if (!nic) return {};
    auto impl = Impl::create(nic, options,
                             detail::vi_transfer_size(options.buffer_size + detail::kHeaderSize,
                                                      nic->attrs().MaxTransferSize),
                             ec);
    if (!impl) return {};
    // The client's own discriminator only names it to the server: unique per process.
    static std::atomic<unsigned> seq{0};
    std::string mine = "vc" + std::to_string(getpid()) + "-" + std::to_string(seq++);
    auto local = nic->address("localhost", mine.data(), mine.size(), ec);
    if (ec) return {};
    auto disc = uri.discriminator();
    auto remote = nic->address(uri.ns_name(), disc.data(), disc.size(), ec);
    if (ec) return {};
    nic.reset();
    VIP_VI_ATTRIBUTES ra;
    VIP_RETURN rc = VipConnectRequest(impl->vi, detail::as_address(local),
                                      detail::as_address(remote), timeout_ms(deadline), &ra);
    if (rc == VIP_SUCCESS) {
        detail::vi_ends(impl->vi, uri, false, &impl->local, &impl->peer);
        impl->start();
        return Stream(std::move(impl));
    }
    ec = make_socket_error(rc);
    return {};
}

bool Stream::is_open() const noexcept {
    return impl_ && impl_->vi;
}

std::size_t Stream::read(std::span<std::byte> buf, std::error_code &ec) {
    return read(buf, kNever, ec);
}

std::size_t Stream::read(std::span<std::byte> buf, Deadline deadline, std::error_code &ec) {
    if (!is_open()) {
        ec = not_connected();
        return 0;
    }
    Impl::Guard g(*impl_);
    return impl_->read(buf, deadline, ec);
}

std::size_t Stream::peek(std::span<std::byte> buf, std::error_code &ec) {
    return peek(buf, kNever, ec);
}

std::size_t Stream::peek(std::span<std::byte> buf, Deadline deadline, std::error_code &ec) {
    if (!is_open()) {
        ec = not_connected();
        return 0;
    }
    Impl::Guard g(*impl_);
    return impl_->read(buf, deadline, ec, true);
}

std::size_t Stream::readable_bytes() noexcept {
    if (!is_open()) return 0;
    Impl::Guard g(*impl_);
    impl_->progress();
    impl_->update_ready();
    return impl_->readable_bytes();
}

std::size_t Stream::write(std::span<const std::byte> buf, std::error_code &ec) {
    return write(buf, kNever, ec);
}

std::size_t Stream::write(std::span<const std::byte> buf, Deadline deadline, std::error_code &ec) {
    if (!is_open()) {
        ec = not_connected();
        return 0;
    }
    Impl::Guard g(*impl_);
    return impl_->write(buf, deadline, ec);
}

void Stream::progress(std::error_code &ec) {
    if (!is_open()) {
        ec = not_connected();
        return;
    }
    ec.clear();
    Impl::Guard g(*impl_);
    impl_->progress();
    impl_->update_ready();
}

void Stream::shutdown_write(std::error_code &ec) {
    if (!is_open()) {
        ec = not_connected();
        return;
    }
    ec.clear();
    Impl::Guard g(*impl_);
    impl_->shutdown_write();
}

void Stream::shutdown_read(std::error_code &ec) {
    if (!is_open()) {
        ec = not_connected();
        return;
    }
    ec.clear();
    Impl::Guard g(*impl_);
    impl_->shutdown_read();
}

std::error_code Stream::close(Deadline deadline) {
    if (!impl_) return not_connected();
    std::error_code ec = impl_->close(deadline);
    impl_.reset();
    return ec;
}

void Stream::abort() noexcept {
    if (impl_) impl_->abort();
    impl_.reset();
}

bool Stream::shared_with_others() const noexcept {
    return is_open() && impl_->shared_with_others();
}

void Stream::finish() noexcept {
    if (!is_open()) return;
    Impl::Guard g(*impl_);
    impl_->finish();
}

bool Stream::finished() noexcept {
    if (!is_open()) return true;
    Impl::Guard g(*impl_);
    return impl_->finished();
}

std::error_code Stream::flush(Deadline deadline) noexcept {
    if (!is_open()) return not_connected();
    Impl::Guard g(*impl_);
    Impl::State &t = *impl_->st;
    std::error_code ec = impl_->wait_until(
        [&] { return t.broken || (t.pending.empty() && t.free_slots.size() == impl_->nsend); },
        deadline);
    if (!ec && t.broken && !t.pending.empty()) ec = t.error;
    return ec;
}

void Stream::switch_out(std::error_code &ec) {
    if (!is_open()) {
        ec = not_connected();
        return;
    }
    ec.clear();
    Impl::Guard g(*impl_);
    impl_->switch_out();
}

bool Stream::peer_switched() const noexcept {
    if (!is_open()) return false;
    Impl::Guard g(*impl_);
    return impl_->st->peer_switched;
}

bool Stream::switching() const noexcept {
    if (!is_open()) return false;
    Impl::Guard g(*impl_);
    return impl_->st->peer_switched || impl_->st->switch_out;
}

bool Stream::peer_closed() const noexcept {
    if (!is_open()) return false;
    Impl::Guard g(*impl_);
    return impl_->st->peer_closed;
}

bool Stream::peer_unread() const noexcept {
    if (!is_open()) return false;
    Impl::Guard g(*impl_);
    const Impl::State &t = *impl_->st;
    return t.credits < t.credits_max;
}

int Stream::fd() const noexcept {
    if (!impl_) return -1;
    if (impl_->vi && !impl_->fd_given.exchange(true)) {
        // From now on the stream keeps the fd truthful; make it so now.
        Impl::Guard g(*impl_);
        impl_->update_ready();
    }
    return impl_->opt.ready_fd ? impl_->ep_fd : impl_->vi_fd;
}

int Stream::wait_fd() const noexcept {
    return impl_ && impl_->vi ? impl_->vi_fd : -1;
}

short Stream::arm(short want, bool looked, bool any_event, bool edge) noexcept {
    if (!is_open()) return 0;
    Impl::Guard g(*impl_);
    if (!looked) impl_->progress();
    VIP_ULONG what = any_event ? VIP_ARM_ANY : impl_->arm_events(!(want & POLLOUT));
    // A send completion left in the VI would make an fd armed for it fire at once.
    impl_->reap_for_arming(what);
    short ev = impl_->events();
    if (ev & (want | POLLERR | POLLHUP)) return ev;
    // Arming also makes the fd readable at once for what came since the look.
    VipArmViWaitFdEx(impl_->vi, edge ? what | VIP_ARM_EDGE : what);
    return ev;
}

bool Stream::arm_to_sleep(short want, bool looked, bool any_event) noexcept {
    return is_open() && !(arm(want, looked, any_event) & (want | POLLERR | POLLHUP));
}

short Stream::sleep_for(short want, Deadline deadline, std::error_code &ec) noexcept {
    ec.clear();
    if (!is_open()) return 0;
    VIP_ULONG what;
    {
        Impl::Guard g(*impl_);
        what = impl_->arm_events(!(want & POLLOUT));
        // A send completion left in the VI would end a sleep armed for it at once.
        impl_->reap_for_arming(what);
        short ev = impl_->events();
        if (ev & (want | POLLERR | POLLHUP)) return ev;
    }
    // Never with the lock: other holders go on meanwhile.  libvipl arms the VI and looks
    // at it a last time itself.
    VIP_RETURN rc = VipWaitViEvent(impl_->vi, what, timeout_ms(deadline));
    if (rc == VIP_INTERRUPTED)
        ec = std::make_error_code(std::errc::interrupted);
    else if (rc == VIP_TIMEOUT)
        ec = std::make_error_code(std::errc::timed_out);
    return 0;
}

void Stream::set_fd_events(short events) noexcept {
    if (!is_open()) return;
    Impl::Guard g(*impl_);
    impl_->st->fd_events = static_cast<short>(events & (POLLIN | POLLOUT));
    impl_->update_ready();
}

short Stream::fd_events() const noexcept {
    if (!is_open()) return 0;
    Impl::Guard g(*impl_);
    return impl_->st->fd_events;
}

bool Stream::holds_back() const noexcept {
    if (!is_open()) return false;
    Impl::Guard g(*impl_);
    return !impl_->st->pending.empty();
}

short Stream::events() noexcept {
    if (!is_open()) return 0;
    Impl::Guard g(*impl_);
    // A poller's look: bytes to read are readiness enough; what is behind them is taken
    // by the read (on tcp a look that finds the queue empty is a recv()).
    impl_->progress(Impl::Look::wait);
    impl_->update_ready();
    return impl_->events();
}

short Stream::events_before_arming() noexcept {
    if (!is_open()) return 0;
    Impl::Guard g(*impl_);
    // Once per read: a waiter that keeps asking (a spin) looks from its second call on.
    uint64_t at = std::exchange(impl_->would_block_at, 0);
    if (!at || Impl::ticks() - at >= Impl::kStandTicks) impl_->progress(Impl::Look::wait);
    impl_->update_ready();
    return impl_->events();
}

void Stream::set_nonblocking(bool on) noexcept {
    if (impl_) impl_->nonblocking.store(on, std::memory_order_relaxed);
}

bool Stream::nonblocking() const noexcept {
    return impl_ && impl_->nonblocking.load(std::memory_order_relaxed);
}

SpinBudget Stream::spin_budget() const noexcept {
    return is_open() ? impl_->spin_budget() : SpinBudget{};
}

void Stream::spin_outcome(bool won) noexcept {
    if (is_open()) impl_->spin_outcome(won);
}

StreamCounters Stream::stream_counters() const noexcept {
    if (!is_open()) return {};
    Impl::Guard g(*impl_);
    return impl_->st->stats;
}

StreamCounters Stream::counters() const noexcept {
    if (!is_open()) return {};
    StreamCounters c = stream_counters();
    VIP_VI_COUNTERS v{};
    if (VipQueryViCounters(impl_->vi, &v) == VIP_SUCCESS) c.doorbells = v.DoorbellsRung;
    return c;
}

const Address &Stream::local_address() const noexcept {
    static const Address none;
    return impl_ ? impl_->local : none;
}

const Address &Stream::peer_address() const noexcept {
    static const Address none;
    return impl_ ? impl_->peer : none;
}

const StreamOptions &Stream::options() const noexcept {
    static const StreamOptions none;
    return impl_ ? impl_->opt : none;
}

} // namespace vipl
