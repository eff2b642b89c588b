#include "nic.h"

#include "vipl/error.h"

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
    // Closing the NIC also destroys whatever a failed teardown may have left on it.
    if (nic_) VipCloseNic(nic_);
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
