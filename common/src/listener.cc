// Listener: binding a discriminator, accepting connection requests.
#include "stream_impl.h"
#include "vipl/error.h"

#include <optional>

namespace vipl {

struct Listener::Impl {
    Uri uri;
    StreamOptions options;
    std::shared_ptr<detail::Nic> nic;
    std::vector<uint8_t> local;
    // A request taken while binding, handed to the first accept().
    std::optional<VIP_CONN_HANDLE> early;
    VIP_VI_ATTRIBUTES early_attrs{};

    ~Impl() {
        if (early) VipConnectReject(*early);
    }
};

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
    if (uri.port == 0) {
        ec = std::make_error_code(std::errc::invalid_argument);
        return {};
    }
    auto impl = std::make_unique<Impl>();
    impl->uri = uri;
    impl->options = options;
    impl->nic =
        detail::Nic::open(options.device.empty() ? uri.listen_device() : options.device, ec);
    if (!impl->nic) return {};
    auto disc = uri.discriminator();
    impl->local = impl->nic->address(uri.ns_name(), disc.data(), disc.size(), ec);
    if (ec) return {};
    // VIPL queues requests only once somebody waited on the discriminator: wait once
    // without sleeping, so that connect() works as soon as bind() returned.
    std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 1024);
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    VIP_RETURN rc = VipConnectWait(impl->nic->handle(), detail::as_address(impl->local), 0,
                                   detail::as_address(remote), &ra, &conn);
    if (rc == VIP_SUCCESS) {
        impl->early = conn;
        impl->early_attrs = ra;
    } else if (rc == VIP_ERROR_RESOURCE) {
        ec = std::make_error_code(std::errc::address_in_use);
        return {};
    } else if (rc != VIP_TIMEOUT) {
        ec = make_vip_error(rc);
        return {};
    }
    ec.clear();
    Listener l;
    l.impl_ = std::move(impl);
    return l;
}

bool Listener::is_open() const noexcept {
    return impl_ != nullptr;
}

const Uri &Listener::uri() const noexcept {
    static const Uri none;
    return impl_ ? impl_->uri : none;
}

Stream Listener::accept(Deadline deadline, std::error_code &ec) {
    if (!impl_) {
        ec = std::make_error_code(std::errc::not_connected);
        return {};
    }
    for (;;) {
        VIP_CONN_HANDLE conn;
        VIP_VI_ATTRIBUTES ra{};
        if (impl_->early) {
            conn = *impl_->early;
            impl_->early.reset();
            ra = impl_->early_attrs;
        } else {
            std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 1024);
            VIP_RETURN rc =
                VipConnectWait(impl_->nic->handle(), detail::as_address(impl_->local),
                               timeout_ms(deadline), detail::as_address(remote), &ra, &conn);
            if (rc != VIP_SUCCESS) {
                ec = rc == VIP_TIMEOUT       ? std::make_error_code(std::errc::timed_out)
                     : rc == VIP_INTERRUPTED ? std::make_error_code(std::errc::interrupted)
                                             : make_vip_error(rc);
                return {};
            }
        }
        // VIPL wants equal MaxTransferSize on both VIs: the connecting side's wins.
        auto mtu = static_cast<uint32_t>(ra.MaxTransferSize);
        std::error_code cec;
        auto s = Stream::Impl::create(impl_->nic, impl_->options, mtu, cec);
        if (!s) {
            VipConnectReject(conn);
            continue;
        }
        VIP_RETURN rc = VipConnectAccept(conn, s->vi);
        if (rc != VIP_SUCCESS) {
            VipConnectReject(conn);
            continue;
        }
        s->start();
        ec.clear();
        return Stream(std::move(s));
    }
}

} // namespace vipl
