// One end of a libvipl connection for the benchmarks, over the public API
// only: NIC, ptag, one registered region holding the descriptors and the
// data buffers, one reliable-delivery VI connected client-server, on any
// provider's device.
#pragma once

#include <vipl.h>
#include <vipl_ext.h>

#include <cstdint>
#include <string>
#include <vector>

namespace bench {

void check(const char *what, VIP_RETURN rc);

class ViplConn {
public:
    // nsend/nrecv descriptors, each pointing at the one send or receive
    // buffer of `max` bytes (the benchmarks never look at the data).
    // Receives are not posted: the caller does it before traffic can arrive.
    // The NIC is `device`; the client reaches the server at `server_host`
    // (its own host when empty).
    ViplConn(int nsend, int nrecv, uint64_t max, const std::string &device = "shm0",
             const std::string &server_host = "");
    ~ViplConn();
    ViplConn(const ViplConn &) = delete;
    ViplConn &operator=(const ViplConn &) = delete;

    // The server accepts on `disc`; the client connects to it from disc + "-c".
    void accept(const std::string &disc);
    void connect(const std::string &disc);

    void post_recv(int i);
    void post_send(int i, uint32_t len, uint32_t imm = 0);
    // Blocking waits, forever (the process's alarm bounds them).
    VIP_DESCRIPTOR *wait_recv();
    void wait_send();
    int recv_index(const VIP_DESCRIPTOR *d) const { return static_cast<int>(d - rdesc_); }
    static uint32_t imm_of(const VIP_DESCRIPTOR *d) {
        return (d->CS.Status & VIP_STATUS_IMMEDIATE) ? d->CS.ImmediateData : 0;
    }
    VIP_VI_COUNTERS counters() const;
    VIP_VI_HANDLE vi() const { return vi_; }

private:
    std::vector<uint8_t> address(const std::string &disc, const std::string &host);
    std::string server_host_;

    VIP_NIC_HANDLE nic_{};
    VIP_PROTECTION_HANDLE ptag_{};
    VIP_VI_HANDLE vi_{};
    VIP_MEM_HANDLE mh_{};
    uint8_t *mem_ = nullptr;
    size_t mem_size_ = 0;
    uint64_t max_ = 0;
    VIP_DESCRIPTOR *sdesc_ = nullptr, *rdesc_ = nullptr;
    int nsend_ = 0, nrecv_ = 0;
    uint8_t *sbuf_ = nullptr, *rbuf_ = nullptr;
};

} // namespace bench
