// A VIPL NIC with one protection tag, shared by a Listener and the Streams it accepted
// (VipConnectAccept needs a VI of the NIC that took the request).
#pragma once

#include <vipl.h>
#include <vipl_ext.h>

#include <memory>
#include <string>
#include <system_error>
#include <vector>

namespace vipl::detail {

class Nic {
public:
    static std::shared_ptr<Nic> open(const std::string &device, std::error_code &ec);
    ~Nic();
    Nic(const Nic &) = delete;
    Nic &operator=(const Nic &) = delete;

    VIP_NIC_HANDLE handle() const { return nic_; }
    VIP_PROTECTION_HANDLE ptag() const { return ptag_; }
    const VIP_NIC_ATTRIBUTES &attrs() const { return attrs_; }

    // A VIP_NET_ADDRESS for `host` (through the NIC's name service) and a discriminator.
    std::vector<uint8_t> address(const std::string &host, const void *disc, size_t disc_len,
                                 std::error_code &ec) const;

private:
    Nic() = default;
    VIP_NIC_HANDLE nic_ = nullptr;
    VIP_PROTECTION_HANDLE ptag_ = nullptr;
    VIP_NIC_ATTRIBUTES attrs_{};
};

inline VIP_NET_ADDRESS *as_address(std::vector<uint8_t> &bytes) {
    return reinterpret_cast<VIP_NET_ADDRESS *>(bytes.data());
}

} // namespace vipl::detail
