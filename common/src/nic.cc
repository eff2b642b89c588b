#include "nic.h"

#include "vipl/error.h"

#include <poll.h>
#include <unistd.h>

#include <cstring>

namespace vipl::detail {

std::shared_ptr<Nic> Nic::open(const std::string &device, std::error_code &ec) {
    std::shared_ptr<Nic> n(new Nic);
    VIP_RETURN rc = VipOpenNic(device.c_str(), &n->nic_);
    if (rc != VIP_SUCCESS) {
        // An unknown device name is the caller's mistake (a URI or an option).
        ec = rc == VIP_INVALID_PARAMETER ? std::make_error_code(std::errc::invalid_argument)
                                         : make_vip_error(rc);
        n->nic_ = nullptr;
        return nullptr;
    }
    if ((rc = VipQueryNic(n->nic_, &n->attrs_)) != VIP_SUCCESS ||
        (rc = VipCreatePtag(n->nic_, &n->ptag_)) != VIP_SUCCESS) {
        ec = make_vip_error(rc);
        return nullptr;
    }
    ec.clear();
    return n;
}

Nic::~Nic() {
    // Closing the NIC also destroys whatever a failed teardown may have left on it, and
    // the registrations still deferred (its region table goes).
    if (nic_) VipCloseNic(nic_);
    for (const Deferred &d : deferred_) close(d.gone_fd);
}

void Nic::defer_deregister(void *addr, VIP_MEM_HANDLE mh, int gone_fd) {
    {
        std::lock_guard g(mu_);
        deferred_.push_back({addr, mh, gone_fd});
    }
    sweep();
}

void Nic::sweep() {
    std::lock_guard g(mu_);
    if (deferred_.empty()) return;
    std::vector<pollfd> p;
    for (const Deferred &d : deferred_) p.push_back({d.gone_fd, POLLIN, 0});
    if (poll(p.data(), p.size(), 0) <= 0) return;
    size_t keep = 0;
    for (size_t i = 0; i < deferred_.size(); ++i) {
        if (p[i].revents & (POLLHUP | POLLERR | POLLIN)) {
            VipDeregisterMem(nic_, deferred_[i].addr, deferred_[i].mh);
            close(deferred_[i].gone_fd);
        } else {
            deferred_[keep++] = deferred_[i];
        }
    }
    deferred_.resize(keep);
}

std::vector<uint8_t> Nic::address(const std::string &host, const void *disc, size_t disc_len,
                                  std::error_code &ec) const {
    std::vector<uint8_t> a(sizeof(VIP_NET_ADDRESS) + attrs_.NicAddressLen + 64 + disc_len);
    VIP_NET_ADDRESS *na = as_address(a);
    std::string name = host;
    VIP_RETURN rc = VipNSGetHostByName(nic_, name.data(), na, 0);
    if (rc != VIP_SUCCESS) {
        ec = rc == VIP_ERROR_NAMESERVICE ? std::make_error_code(std::errc::host_unreachable)
                                         : make_vip_error(rc);
        return {};
    }
    na->DiscriminatorLen = static_cast<VIP_UINT16>(disc_len);
    std::memcpy(na->HostAddress + na->HostAddressLen, disc, disc_len);
    ec.clear();
    return a;
}

} // namespace vipl::detail
