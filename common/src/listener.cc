// Listener: binding a discriminator (a port, a free one, or a service name), its
// readiness descriptor, accepting connection requests.
#include "ends.h"
#include "random_seed.h"
#include "stream_impl.h"
#include "vipl/error.h"

#include <unistd.h>

#include <random>

namespace vipl {

namespace {

// Port 0 picks a port at random in this range (a discriminator for shm, the TCP port for
// tcp), again while the one picked is in use: by another listener, or on tcp by any
// socket of the host.
constexpr uint16_t kAnyFirst = 20000, kAnyLast = 60999;
constexpr int kAnyTries = 64;

} // namespace

struct Listener::Impl {
    Uri uri;
    StreamOptions options;
    std::shared_ptr<detail::Nic> nic;
    std::vector<uint8_t> net_address; // the VIP_NET_ADDRESS served
    Address address;
    int wait_fd = -1; // libvipl's, closed with the NIC

    // Opens the NIC and starts serving uri's discriminator.
    static std::unique_ptr<Impl> open(const Uri &uri, std::error_code &ec,
                                      const StreamOptions &options);
};

std::unique_ptr<Listener::Impl> Listener::Impl::open(const Uri &uri, std::error_code &ec,
                                                     const StreamOptions &options) {
    auto impl = std::make_unique<Impl>();
    impl->uri = uri;
    impl->options = options;
    impl->nic =
        detail::Nic::open(options.device.empty() ? uri.listen_device() : options.device, ec);
    if (!impl->nic) return nullptr;
    auto disc = uri.discriminator();
    impl->net_address = impl->nic->address(uri.ns_name(), disc.data(), disc.size(), ec);
    if (ec) return nullptr;
    // Asking for the descriptor starts serving the discriminator: requests made from now
    // on are queued, so connect() works as soon as bind() returned.
    VIP_RETURN rc = VipGetConnWaitFd(impl->nic->handle(), detail::as_address(impl->net_address),
                                     &impl->wait_fd);
    if (rc != VIP_SUCCESS) {
        ec = rc == VIP_ERROR_RESOURCE ? std::make_error_code(std::errc::address_in_use)
                                      : make_vip_error(rc);
        return nullptr;
    }
    impl->address = detail::listen_address(*impl->nic, uri);
    ec.clear();
    return impl;
}

Listener::Listener() noexcept = default;
Listener::Listener(Listener &&) noexcept = default;
Listener &Listener::operator=(Listener &&) noexcept = default;
Listener::~Listener() = default;

Listener Listener::bind(std::string_view uri, std::error_code &ec, const StreamOptions &options) {
    Uri u = Uri::parse(uri, ec);
    if (ec) return {};
    return bind(u, ec, options);
}

Listener Listener::bind(const Uri &uri, std::error_code &ec, const StreamOptions &options) {
    Listener l;
    if (uri.has_discriminator()) {
        l.impl_ = Impl::open(uri, ec, options);
        return l;
    }
    std::mt19937 rng(detail::random_seed() ^ static_cast<unsigned>(getpid()));
    std::uniform_int_distribution<int> pick(kAnyFirst, kAnyLast);
    Uri u = uri;
    for (int i = 0; i < kAnyTries; ++i) {
        u.port = static_cast<uint16_t>(pick(rng));
        l.impl_ = Impl::open(u, ec, options);
        if (ec != std::errc::address_in_use) break;
    }
    return l;
}

bool Listener::is_open() const noexcept {
    return impl_ != nullptr;
}

const Uri &Listener::uri() const noexcept {
    static const Uri none;
    return impl_ ? impl_->uri : none;
}

const Address &Listener::local_address() const noexcept {
    static const Address none;
    return impl_ ? impl_->address : none;
}

int Listener::fd() const noexcept {
    return impl_ ? impl_->wait_fd : -1;
}

Stream Listener::accept(Deadline deadline, std::error_code &ec) {
    if (!impl_) {
        ec = std::make_error_code(std::errc::not_connected);
        return {};
    }
    for (;;) {
        VIP_CONN_HANDLE conn;
        VIP_VI_ATTRIBUTES ra{};
        std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 1024);
        // A past deadline is a timeout of 0: libvipl looks at what arrived and never sleeps.
        VIP_RETURN rc =
            VipConnectWait(impl_->nic->handle(), detail::as_address(impl_->net_address),
                           timeout_ms(deadline), detail::as_address(remote), &ra, &conn);
        if (rc != VIP_SUCCESS) {
            ec = make_socket_error(rc);
            return {};
        }
        // VIPL wants equal MaxTransferSize on both VIs: the connecting side's wins (and
        // with it its buffer size: detail::mtu_of_transfer_size).
        std::error_code cec;
        auto s = Stream::Impl::create(impl_->nic, impl_->options, ra.MaxTransferSize, cec);
        if (!s) {
            VipConnectReject(conn);
            continue;
        }
        rc = VipConnectAccept(conn, s->vi);
        if (rc != VIP_SUCCESS) {
            VipConnectReject(conn);
            continue;
        }
        detail::vi_ends(s->vi, impl_->uri, true, &s->local, &s->peer);
        s->start();
        ec.clear();
        return Stream(std::move(s));
    }
}

} // namespace vipl
