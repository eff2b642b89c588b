#include "vipl_conn.h"

#include "harness.h"

#include <algorithm>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

namespace bench {

void check(const char *what, VIP_RETURN rc) {
    if (rc != VIP_SUCCESS) fail("%s: %s", what, VipReturnString(rc));
}

ViplConn::ViplConn(int nsend, int nrecv, uint64_t max, const std::string &device,
                   const std::string &server_host)
    : server_host_(server_host), max_(std::max<uint64_t>(max, 64)), nsend_(nsend), nrecv_(nrecv) {
    check("VipOpenNic", VipOpenNic(device.c_str(), &nic_));
    check("VipCreatePtag", VipCreatePtag(nic_, &ptag_));
    size_t descs = static_cast<size_t>(nsend + nrecv) * sizeof(VIP_DESCRIPTOR);
    size_t buf = (max_ + 4095) & ~size_t(4095);
    mem_size_ = ((descs + 4095) & ~size_t(4095)) + 2 * buf;
    void *p = mmap(nullptr, mem_size_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) fail("mmap %zu bytes", mem_size_);
    mem_ = static_cast<uint8_t *>(p);
    VIP_MEM_ATTRIBUTES ma{};
    ma.Ptag = ptag_;
    check("VipRegisterMem", VipRegisterMem(nic_, mem_, mem_size_, &ma, &mh_));
    sdesc_ = reinterpret_cast<VIP_DESCRIPTOR *>(mem_);
    rdesc_ = sdesc_ + nsend;
    sbuf_ = mem_ + ((descs + 4095) & ~size_t(4095));
    rbuf_ = sbuf_ + buf;
    VIP_VI_ATTRIBUTES va{};
    va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
    va.MaxTransferSize = max_;
    va.Ptag = ptag_;
    check("VipCreateVi", VipCreateVi(nic_, &va, nullptr, nullptr, &vi_));
}

ViplConn::~ViplConn() {
    VipDisconnect(vi_);
    VipCloseNic(nic_);
    munmap(mem_, mem_size_);
}

std::vector<uint8_t> ViplConn::address(const std::string &disc, const std::string &host) {
    std::vector<uint8_t> a(sizeof(VIP_NET_ADDRESS) + 64 + disc.size());
    auto *na = reinterpret_cast<VIP_NET_ADDRESS *>(a.data());
    std::string name = host.empty() ? "localhost" : host;
    check("VipNSGetHostByName", VipNSGetHostByName(nic_, name.data(), na, 0));
    na->DiscriminatorLen = static_cast<VIP_UINT16>(disc.size());
    memcpy(na->HostAddress + na->HostAddressLen, disc.data(), disc.size());
    return a;
}

void ViplConn::accept(const std::string &disc) {
    auto local = address(disc, "");
    std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 128);
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    check("VipConnectWait",
          VipConnectWait(nic_, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()), 30000,
                         reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), &ra, &conn));
    check("VipConnectAccept", VipConnectAccept(conn, vi_));
}

void ViplConn::connect(const std::string &disc) {
    auto local = address(disc + "-c", "");
    auto remote = address(disc, server_host_);
    VIP_VI_ATTRIBUTES ra;
    VIP_RETURN rc = VIP_NO_MATCH;
    // The server may not be waiting yet.
    for (int tries = 0; tries < 5000 && rc == VIP_NO_MATCH; ++tries) {
        rc = VipConnectRequest(vi_, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()),
                               reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), 10000, &ra);
        if (rc == VIP_NO_MATCH) usleep(2000);
    }
    check("VipConnectRequest", rc);
}

void ViplConn::post_recv(int i) {
    VIP_DESCRIPTOR *d = &rdesc_[i];
    memset(d, 0, sizeof *d);
    d->CS.SegCount = 1;
    d->CS.Length = static_cast<VIP_UINT32>(max_);
    d->DS[0].Local.Data.Address = rbuf_;
    d->DS[0].Local.Handle = mh_;
    d->DS[0].Local.Length = static_cast<VIP_UINT32>(max_);
    check("VipPostRecv", VipPostRecv(vi_, d, mh_));
}

void ViplConn::post_send(int i, uint32_t len, uint32_t imm) {
    VIP_DESCRIPTOR *d = &sdesc_[i];
    memset(d, 0, sizeof *d);
    if (imm) {
        d->CS.Control = VIP_CONTROL_IMMEDIATE;
        d->CS.ImmediateData = imm;
    }
    d->CS.SegCount = len ? 1 : 0;
    d->CS.Length = len;
    d->DS[0].Local.Data.Address = sbuf_;
    d->DS[0].Local.Handle = mh_;
    d->DS[0].Local.Length = len;
    check("VipPostSend", VipPostSend(vi_, d, mh_));
}

VIP_DESCRIPTOR *ViplConn::wait_recv() {
    VIP_DESCRIPTOR *d;
    VIP_RETURN rc;
    while ((rc = VipRecvWait(vi_, VIP_INFINITE, &d)) == VIP_INTERRUPTED) {
    }
    check("VipRecvWait", rc);
    return d;
}

void ViplConn::wait_send() {
    VIP_DESCRIPTOR *d;
    VIP_RETURN rc;
    while ((rc = VipSendWait(vi_, VIP_INFINITE, &d)) == VIP_INTERRUPTED) {
    }
    check("VipSendWait", rc);
}

VIP_VI_COUNTERS ViplConn::counters() const {
    VIP_VI_COUNTERS c{};
    check("VipQueryViCounters", VipQueryViCounters(vi_, &c));
    return c;
}

} // namespace bench
