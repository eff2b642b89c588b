// VipOpenNic, VipCloseNic, VipQueryNic, and NIC attributes that tell the
// truth: every limit VipQueryNic reports is the limit the library enforces.
#include "support.h"

#include <algorithm>
#include <cstring>
#include <sys/mman.h>
#include <sys/wait.h>
#include <vector>

namespace {

// A receive descriptor with n zero-length segments: valid at any count the
// NIC allows, and needs no buffer.
void empty_segments(VIP_DESCRIPTOR *d, uint32_t n, VIP_MEM_HANDLE mh) {
    memset(d, 0, sizeof(VIP_CONTROL_SEGMENT) + 16ull * n);
    d->CS.SegCount = static_cast<uint16_t>(n);
    for (uint32_t i = 0; i < n; ++i) (&d->DS[0] + i)->Local.Handle = mh;
}

} // namespace

TEST_CASE("VipOpenNic returns a new, independent instance per call", "[nic]") {
    std::string device = VT_DEVICE();
    VIP_NIC_HANDLE a = nullptr, b = nullptr;
    REQUIRE(VipOpenNic(device.c_str(), &a) == VIP_SUCCESS);
    REQUIRE(VipOpenNic(device.c_str(), &b) == VIP_SUCCESS);
    CHECK(a != nullptr);
    CHECK(b != nullptr);
    CHECK(a != b);
    // Closing one instance leaves the other usable.
    REQUIRE(VipCloseNic(a) == VIP_SUCCESS);
    VIP_NIC_ATTRIBUTES attrs;
    CHECK(VipQueryNic(b, &attrs) == VIP_SUCCESS);
    VIP_PROTECTION_HANDLE ptag;
    CHECK(VipCreatePtag(b, &ptag) == VIP_SUCCESS);
    CHECK(VipCloseNic(b) == VIP_SUCCESS);
}

TEST_CASE("VipOpenNic refuses NULL arguments and unknown devices", "[nic][errors]") {
    std::string device = VT_DEVICE();
    VIP_NIC_HANDLE nic = reinterpret_cast<VIP_NIC_HANDLE>(0x1234);
    CHECK(VipOpenNic(nullptr, &nic) == VIP_INVALID_PARAMETER);
    CHECK(VipOpenNic(device.c_str(), nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipOpenNic("no-such-device0", &nic) == VIP_INVALID_PARAMETER);
    CHECK(VipOpenNic("", &nic) == VIP_INVALID_PARAMETER);
    // Output parameters are written only on success.
    CHECK(nic == reinterpret_cast<VIP_NIC_HANDLE>(0x1234));
}

TEST_CASE("VipCloseNic refuses garbage, NULL and closed handles", "[nic][errors]") {
    std::string device = VT_DEVICE();
    CHECK(VipCloseNic(nullptr) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles()) CHECK(VipCloseNic(h) == VIP_INVALID_PARAMETER);
    VIP_NIC_HANDLE nic;
    REQUIRE(VipOpenNic(device.c_str(), &nic) == VIP_SUCCESS);
    REQUIRE(VipCloseNic(nic) == VIP_SUCCESS);
    CHECK(VipCloseNic(nic) == VIP_INVALID_PARAMETER);
    VIP_NIC_ATTRIBUTES attrs;
    CHECK(VipQueryNic(nic, &attrs) == VIP_INVALID_PARAMETER);
    // A new NIC may reuse the closed one's memory: the old handle stays dead.
    VIP_NIC_HANDLE again;
    REQUIRE(VipOpenNic(device.c_str(), &again) == VIP_SUCCESS);
    CHECK(VipQueryNic(nic, &attrs) == VIP_INVALID_PARAMETER);
    CHECK(VipCloseNic(again) == VIP_SUCCESS);
}

TEST_CASE("VipCloseNic destroys what the program left on the NIC", "[nic]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    std::vector<uint8_t> buf(8192);
    VIP_MEM_ATTRIBUTES ma{n.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    VIP_MEM_HANDLE mh;
    REQUIRE(VipRegisterMem(n.nic, buf.data(), buf.size(), &ma, &mh) == VIP_SUCCESS);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(n.nic, 8, &cq) == VIP_SUCCESS);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, cq, cq, &vi) == VIP_SUCCESS);

    REQUIRE(VipCloseNic(n.nic) == VIP_SUCCESS);
    CHECK(VipQueryVi(vi, nullptr, nullptr, nullptr, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipDestroyVi(vi) == VIP_INVALID_PARAMETER);
    VIP_VI_HANDLE v2;
    VIP_BOOLEAN rq;
    CHECK(VipCQDone(cq, &v2, &rq) == VIP_INVALID_PARAMETER);
    CHECK(VipDestroyCQ(cq) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryMem(n.nic, buf.data(), mh, &ma) == VIP_INVALID_PARAMETER);
    CHECK(VipDestroyPtag(n.nic, n.ptag) == VIP_INVALID_PARAMETER);
    n.nic = nullptr; // already closed
}

TEST_CASE("VipQueryNic refuses bad handles and a NULL result pointer", "[nic][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_NIC_ATTRIBUTES attrs;
    CHECK(VipQueryNic(n.nic, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryNic(nullptr, &attrs) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles())
        CHECK(VipQueryNic(h, &attrs) == VIP_INVALID_PARAMETER);
    // A handle of another kind of object is not a NIC handle.
    CHECK(VipQueryNic(n.ptag, &attrs) == VIP_INVALID_PARAMETER);
}

TEST_CASE("NIC attributes describe the NIC", "[nic][attrs]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    const VIP_NIC_ATTRIBUTES &a = n.attrs;
    CHECK(memchr(a.Name, 0, sizeof a.Name) != nullptr);
    CHECK(strlen(a.Name) > 0);
    // Every function is thread safe (vipl.h).
    CHECK(a.ThreadSafe == VIP_TRUE);
    REQUIRE(a.NicAddressLen > 0);
    REQUIRE(a.LocalNicAddress != nullptr);
    CHECK(a.MaxDiscriminatorLen > 0);
    CHECK(a.MaxRegisterBytes > 0);
    CHECK(a.MaxRegisterRegions > 0);
    CHECK(a.MaxRegisterBlockBytes > 0);
    CHECK(a.MaxRegisterBlockBytes <= a.MaxRegisterBytes);
    CHECK(a.MaxVI > 0);
    CHECK(a.MaxDescriptorsPerQueue > 0);
    CHECK(a.MaxSegmentsPerDesc >= 2);
    CHECK(a.MaxCQ > 0);
    CHECK(a.MaxCQEntries > 0);
    CHECK(a.MaxTransferSize > 0);
    CHECK(a.MaxPtags > 0);
    CHECK((a.ReliabilityLevelSupport & VIP_SERVICE_UNRELIABLE) != 0);
    CHECK((a.ReliabilityLevelSupport & ~(VIP_SERVICE_UNRELIABLE | VIP_SERVICE_RELIABLE_DELIVERY |
                                         VIP_SERVICE_RELIABLE_RECEPTION)) == 0);
    CHECK((a.RDMAReadSupport & ~a.ReliabilityLevelSupport) == 0);

    // The NIC's address is the host address the name service gives for this host.
    std::vector<uint8_t> buf(sizeof(VIP_NET_ADDRESS) + 256);
    auto *addr = reinterpret_cast<VIP_NET_ADDRESS *>(buf.data());
    REQUIRE(VipNSGetHostByName(n.nic, const_cast<char *>("localhost"), addr, 0) == VIP_SUCCESS);
    REQUIRE(addr->HostAddressLen == a.NicAddressLen);
    CHECK(memcmp(addr->HostAddress, a.LocalNicAddress, a.NicAddressLen) == 0);

    // Two instances of the same device describe the same NIC.
    vt::Nic m(device);
    CHECK(strcmp(m.attrs.Name, a.Name) == 0);
    CHECK(m.attrs.NicAddressLen == a.NicAddressLen);
    CHECK(memcmp(m.attrs.LocalNicAddress, a.LocalNicAddress, a.NicAddressLen) == 0);
    CHECK(m.attrs.MaxTransferSize == a.MaxTransferSize);
}

TEST_CASE("The reliability levels the NIC reports are the ones it accepts", "[nic][attrs]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    for (VIP_RELIABILITY_LEVEL level :
         {VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION}) {
        INFO("level " << level);
        VIP_VI_ATTRIBUTES va = vt::vi_attrs(n, level);
        VIP_VI_HANDLE vi = nullptr;
        VIP_RETURN rc = VipCreateVi(n.nic, &va, nullptr, nullptr, &vi);
        if (n.attrs.ReliabilityLevelSupport & level) {
            CHECK(rc == VIP_SUCCESS);
            if (rc == VIP_SUCCESS) CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
        } else {
            CHECK(rc == VIP_INVALID_RELIABILITY_LEVEL);
        }
        // RDMA read is accepted exactly at the levels RDMAReadSupport names.
        va.EnableRdmaRead = VIP_TRUE;
        rc = VipCreateVi(n.nic, &va, nullptr, nullptr, &vi);
        if (!(n.attrs.ReliabilityLevelSupport & level)) {
            CHECK(rc == VIP_INVALID_RELIABILITY_LEVEL);
        } else if (n.attrs.RDMAReadSupport & level) {
            CHECK(rc == VIP_SUCCESS);
            if (rc == VIP_SUCCESS) CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
        } else {
            CHECK(rc == VIP_INVALID_RDMAREAD);
        }
    }
}

TEST_CASE("MaxTransferSize is enforced on VIs", "[nic][attrs][limits]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n, VIP_SERVICE_RELIABLE_DELIVERY, n.attrs.MaxTransferSize);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
    va.MaxTransferSize = n.attrs.MaxTransferSize + 1;
    CHECK(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_INVALID_MTU);
}

TEST_CASE("MaxSegmentsPerDesc is enforced on descriptors", "[nic][attrs][limits]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    uint32_t max = static_cast<uint32_t>(n.attrs.MaxSegmentsPerDesc);
    REQUIRE(max < 65535);
    size_t bytes = ((sizeof(VIP_CONTROL_SEGMENT) + 16ull * (max + 1)) / 64 + 2) * 64 * 2;
    vt::Memory m(n, (bytes + 4095) & ~size_t(4095));
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);

    VIP_DESCRIPTOR *ok = m.desc(0);
    empty_segments(ok, max, m.mh);
    CHECK(VipPostRecv(vi, ok, m.mh) == VIP_SUCCESS);

    VIP_DESCRIPTOR *bad = reinterpret_cast<VIP_DESCRIPTOR *>(m.base + bytes / 2);
    empty_segments(bad, max + 1, m.mh);
    CHECK(VipPostRecv(vi, bad, m.mh) == VIP_DESCRIPTOR_ERROR);
    CHECK((bad->CS.Status & VIP_STATUS_DONE) != 0);
    CHECK((bad->CS.Status & VIP_STATUS_FORMAT_ERROR) != 0);

    VIP_BOOLEAN sq_empty = VIP_FALSE, rq_empty = VIP_TRUE;
    REQUIRE(VipQueryVi(vi, nullptr, nullptr, &sq_empty, &rq_empty) == VIP_SUCCESS);
    CHECK(rq_empty == VIP_FALSE); // only the good one was queued
    n.close();
}

TEST_CASE("MaxDescriptorsPerQueue is enforced on each work queue", "[nic][attrs][limits]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_ULONG max = n.attrs.MaxDescriptorsPerQueue;
    if (max > (1u << 16)) {
        WARN("MaxDescriptorsPerQueue " << max << " is too large to fill here: not checked");
        return;
    }
    vt::Memory m(n, ((max + 1) * 64 + 4095) & ~size_t(4095));
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    VIP_ULONG posted = 0;
    for (; posted < max; ++posted) {
        vt::set_desc(m.desc(posted), nullptr, 0, m.mh);
        if (VipPostRecv(vi, m.desc(posted), m.mh) != VIP_SUCCESS) break;
    }
    CHECK(posted == max);
    vt::set_desc(m.desc(max), nullptr, 0, m.mh);
    CHECK(VipPostRecv(vi, m.desc(max), m.mh) == VIP_ERROR_RESOURCE);
    n.close();
}

TEST_CASE("MaxDescriptorsPerQueue is enforced on the send queue", "[nic][attrs][limits]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    VIP_ULONG max = nb.attrs.MaxDescriptorsPerQueue;
    if (max > (1u << 16)) {
        WARN("MaxDescriptorsPerQueue " << max << " is too large to fill here: not checked");
        return;
    }
    vt::Memory mb(nb, ((max + 1) * 64 + 4095) & ~size_t(4095));
    // Reliable reception, and a receiver that makes no call: no send can
    // complete, so every one stays outstanding.
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na, VIP_SERVICE_RELIABLE_RECEPTION),
                                  vt::vi_attrs(nb, VIP_SERVICE_RELIABLE_RECEPTION));
    VIP_ULONG posted = 0;
    for (; posted < max; ++posted) {
        vt::set_desc(mb.desc(posted), nullptr, 0, mb.mh);
        if (VipPostSend(p.b, mb.desc(posted), mb.mh) != VIP_SUCCESS) break;
    }
    CHECK(posted == max);
    vt::set_desc(mb.desc(max), nullptr, 0, mb.mh);
    CHECK(VipPostSend(p.b, mb.desc(max), mb.mh) == VIP_ERROR_RESOURCE);
    REQUIRE(VipDisconnect(p.b) == VIP_SUCCESS);
    vt::destroy_vi(p.b);
    vt::destroy_vi(p.a);
}

TEST_CASE("MaxPtags is enforced", "[nic][attrs][limits]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device); // holds one ptag already
    VIP_ULONG max = n.attrs.MaxPtags;
    if (max > (1u << 20)) {
        WARN("MaxPtags " << max << " is too large to exhaust here: not checked");
        return;
    }
    std::vector<VIP_PROTECTION_HANDLE> made;
    VIP_PROTECTION_HANDLE p;
    while (made.size() < max && VipCreatePtag(n.nic, &p) == VIP_SUCCESS) made.push_back(p);
    CHECK(made.size() + 1 == max);
    CHECK(VipCreatePtag(n.nic, &p) == VIP_ERROR_RESOURCE);
    // Destroying one makes room for one.
    REQUIRE(!made.empty());
    REQUIRE(VipDestroyPtag(n.nic, made.back()) == VIP_SUCCESS);
    made.pop_back();
    CHECK(VipCreatePtag(n.nic, &p) == VIP_SUCCESS);
}

TEST_CASE("MaxCQEntries is enforced", "[nic][attrs][limits]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(n.nic, n.attrs.MaxCQEntries, &cq) == VIP_SUCCESS);
    CHECK(VipResizeCQ(cq, n.attrs.MaxCQEntries + 1) == VIP_INVALID_PARAMETER);
    CHECK(VipDestroyCQ(cq) == VIP_SUCCESS);
    CHECK(VipCreateCQ(n.nic, n.attrs.MaxCQEntries + 1, &cq) == VIP_INVALID_PARAMETER);
}

TEST_CASE("MaxDiscriminatorLen is enforced", "[nic][attrs][limits]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    uint16_t max = n.attrs.MaxDiscriminatorLen;
    std::string base = vt::unique_disc("-maxd");
    REQUIRE(base.size() <= max);
    std::string fits = base + std::string(max - base.size(), 'x');
    std::string over = fits + "y";
    vt::Address ok(n.nic, fits), bad(n.nic, over);
    std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 512);
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    CHECK(VipConnectWait(n.nic, ok.get(), 0, reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()),
                         &ra, &conn) == VIP_TIMEOUT);
    CHECK(VipConnectWait(n.nic, bad.get(), 0, reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()),
                         &ra, &conn) == VIP_INVALID_PARAMETER);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    CHECK(VipConnectRequest(vi, ok.get(), bad.get(), 100, &ra) == VIP_INVALID_PARAMETER);
    CHECK(VipConnectPeerRequest(vi, ok.get(), bad.get(), 100) == VIP_INVALID_PARAMETER);
    CHECK(vt::vi_state(vi) == VIP_STATE_IDLE);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
}

TEST_CASE("MaxRegisterRegions is enforced", "[nic][attrs][limits]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_ULONG max = n.attrs.MaxRegisterRegions;
    if (max > (1u << 17)) {
        WARN("MaxRegisterRegions " << max << " is too large to exhaust here: not checked");
        return;
    }
    void *page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(page != MAP_FAILED);
    VIP_MEM_ATTRIBUTES ma{n.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    std::vector<VIP_MEM_HANDLE> handles;
    VIP_MEM_HANDLE mh;
    // The same page may be registered many times; each registration is a region.
    while (handles.size() < max && VipRegisterMem(n.nic, page, 4096, &ma, &mh) == VIP_SUCCESS)
        handles.push_back(mh);
    CHECK(handles.size() == max);
    CHECK(VipRegisterMem(n.nic, page, 4096, &ma, &mh) == VIP_ERROR_RESOURCE);
    REQUIRE(!handles.empty());
    REQUIRE(VipDeregisterMem(n.nic, page, handles.back()) == VIP_SUCCESS);
    handles.pop_back();
    CHECK(VipRegisterMem(n.nic, page, 4096, &ma, &mh) == VIP_SUCCESS);
    n.close();
    munmap(page, 4096);
}

TEST_CASE("MaxRegisterBlockBytes is enforced", "[nic][attrs][limits]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_ULONG block = n.attrs.MaxRegisterBlockBytes;
    // Reserve (without committing) a mapping one page larger than the limit,
    // so that the only thing wrong with the request is its size.
    size_t len = block + 4096;
    void *p = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        WARN("cannot reserve " << len << " bytes of address space: not checked");
        return;
    }
    VIP_MEM_ATTRIBUTES ma{n.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    VIP_MEM_HANDLE mh;
    CHECK(VipRegisterMem(n.nic, p, block + 1, &ma, &mh) == VIP_ERROR_RESOURCE);
    munmap(p, len);
}

TEST_CASE("MaxRegisterBytes is enforced", "[nic][attrs][limits]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_ULONG total = n.attrs.MaxRegisterBytes, block = n.attrs.MaxRegisterBlockBytes;
    if (total > (1ull << 32)) {
        WARN("MaxRegisterBytes " << total << " is too large to exhaust here: not checked");
        return;
    }
    size_t len = total + 4096;
    auto *p = static_cast<uint8_t *>(
        mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    REQUIRE(p != MAP_FAILED);
    VIP_MEM_ATTRIBUTES ma{n.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    VIP_MEM_HANDLE mh;
    VIP_ULONG done = 0;
    while (done < total) {
        VIP_ULONG chunk = std::min(block, total - done);
        REQUIRE(VipRegisterMem(n.nic, p + done, chunk, &ma, &mh) == VIP_SUCCESS);
        done += chunk;
    }
    CHECK(VipRegisterMem(n.nic, p + done, 1, &ma, &mh) == VIP_ERROR_RESOURCE);
    n.close();
    munmap(p, len);
}

TEST_CASE("MaxVI is enforced", "[nic][attrs][limits]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_ULONG max = n.attrs.MaxVI;
    if (max > 4096) {
        WARN("MaxVI " << max << " is too large to exhaust here: not checked");
        return;
    }
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    std::vector<VIP_VI_HANDLE> made;
    VIP_VI_HANDLE vi;
    while (made.size() < max && VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS)
        made.push_back(vi);
    CHECK(made.size() == max);
    CHECK(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_ERROR_RESOURCE);
    REQUIRE(!made.empty());
    REQUIRE(VipDestroyVi(made.back()) == VIP_SUCCESS);
    CHECK(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
}

TEST_CASE("Limits configured small are reported and enforced", "[nic][attrs]") {
    // The defaults are too large to exhaust in a test; a fresh process reads
    // small ones from the environment and runs every [limits] case with them.
    int status = vt::run_fresh("[limits]",
                               {"VIPL_MAX_VI=12", "VIPL_MAX_CQ=6", "VIPL_MAX_CQ_ENTRIES=32",
                                "VIPL_MAX_QUEUE=40", "VIPL_MAX_SEGMENTS=5", "VIPL_MAX_PTAGS=9",
                                "VIPL_MAX_REGIONS=20", "VIPL_MAX_TRANSFER=16384",
                                "VIPL_MAX_REGISTER_BYTES=2097152"},
                               60);
    INFO(vt::status_text(status));
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}
