// A VIPL NIC with one protection tag, shared by a Listener and the Streams it accepted
// (VipConnectAccept needs a VI of the NIC that took the request).
#pragma once

#include <vipl.h>
#include <vipl_ext.h>

#include <memory>
#include <mutex>
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

    // A shareable stream this process left (others hold it) registered memory at `addr`
    // (handle mh) in this NIC's region table, which fork children share: it is
    // deregistered once `gone_fd` (the read end of a pipe every holder keeps the write
    // end of) hangs up, i.e. the last holder closed or died.  Takes gone_fd.
    void defer_deregister(void *addr, VIP_MEM_HANDLE mh, int gone_fd);
    // Deregisters what is due; called whenever a stream is made on the NIC.
    void sweep();

private:
    Nic() = default;
    struct Deferred {
        void *addr;
        VIP_MEM_HANDLE mh;
        int gone_fd;
    };
    std::mutex mu_; // deferred_: a Listener and its streams may be used by several threads
    std::vector<Deferred> deferred_;
    VIP_NIC_HANDLE nic_ = nullptr;
    VIP_PROTECTION_HANDLE ptag_ = nullptr;
    VIP_NIC_ATTRIBUTES attrs_{};
};

inline VIP_NET_ADDRESS *as_address(std::vector<uint8_t> &bytes) {
    return reinterpret_cast<VIP_NET_ADDRESS *>(bytes.data());
}

} // namespace vipl::detail
