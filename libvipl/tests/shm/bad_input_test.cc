// Bad input never crashes and gets the documented answer: garbage and stale
// handles to every function that takes one, and every kind of malformed
// descriptor (README, "Post errors").
#include "procs.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <random>
#include <unistd.h>

namespace {

void ignore_desc(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *) {}
void ignore_cq(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN) {}
void ignore_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR *) {}

// Valid arguments for everything but the handle under test.
struct Good {
    vt::Nic nic{"shm0"};
    vt::Memory mem{nic, 1 << 16};
    VIP_VI_HANDLE vi = nullptr;
    VIP_CQ_HANDLE cq = nullptr;
    std::vector<uint8_t> addr = vt::address(nic.nic, vt::unique_disc("g"));
    std::vector<uint8_t> addr2 = vt::address(nic.nic, vt::unique_disc("h"));
    Good() {
        VIP_VI_ATTRIBUTES a = vt::vi_attrs(nic);
        REQUIRE(VipCreateVi(nic.nic, &a, nullptr, nullptr, &vi) == VIP_SUCCESS);
        REQUIRE(VipCreateCQ(nic.nic, 16, &cq) == VIP_SUCCESS);
        vt::set_desc(mem.desc(0), mem.base + 4096, 64, mem.mh);
    }
    ~Good() {
        VipDestroyVi(vi);
        VipDestroyCQ(cq);
    }
    VIP_NET_ADDRESS *a1() { return reinterpret_cast<VIP_NET_ADDRESS *>(addr.data()); }
    VIP_NET_ADDRESS *a2() { return reinterpret_cast<VIP_NET_ADDRESS *>(addr2.data()); }
};

#define EXPECT_RC(call, want)                                                                      \
    do {                                                                                           \
        VIP_RETURN rc_ = (call);                                                                   \
        INFO(#call << " returned " << VipReturnString(rc_));                                       \
        CHECK(rc_ == (want));                                                                      \
    } while (0)

void bad_nic(Good &g, VIP_NIC_HANDLE h) {
    VIP_NIC_ATTRIBUTES na;
    VIP_PROTECTION_HANDLE p;
    VIP_MEM_HANDLE mh;
    VIP_MEM_ATTRIBUTES ma{g.nic.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(g.nic);
    VIP_VI_HANDLE vi;
    VIP_CQ_HANDLE cq;
    std::vector<uint8_t> remote(256);
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    char name[256];
    VIP_ULONG len = sizeof name;
    VIP_AUTODISCOVERY_LIST list{};
    EXPECT_RC(VipQueryNic(h, &na), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipCreatePtag(h, &p), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipDestroyPtag(h, g.nic.ptag), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipRegisterMem(h, g.mem.base, 4096, &ma, &mh), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipDeregisterMem(h, g.mem.base, g.mem.mh), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipQueryMem(h, g.mem.base, g.mem.mh, &ma), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipSetMemAttributes(h, g.mem.base, g.mem.mh, &ma), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipCreateVi(h, &va, nullptr, nullptr, &vi), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipCreateCQ(h, 16, &cq), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipConnectWait(h, g.a1(), 10, reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), &ra,
                             &conn),
              VIP_INVALID_PARAMETER);
    EXPECT_RC(VipNSInit(h, nullptr), VIP_INVALID_PARAMETER);
    char host[] = "localhost";
    EXPECT_RC(VipNSGetHostByName(h, host, reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), 0),
              VIP_INVALID_PARAMETER);
    EXPECT_RC(VipNSGetHostByAddr(h, g.a1(), name, &len), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipNSShutdown(h), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipErrorCallback(h, nullptr, ignore_error), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipQuerySystemManagementInfo(h, VIP_SMI_AUTODISCOVERY, &list), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipCloseNic(h), VIP_INVALID_PARAMETER);
}

void bad_vi(Good &g, VIP_VI_HANDLE h) {
    VIP_VI_STATE st;
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(g.nic), ra;
    VIP_DESCRIPTOR *d;
    int fd;
    VIP_VI_COUNTERS c;
    EXPECT_RC(VipQueryVi(h, &st, &va, nullptr, nullptr), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipSetViAttributes(h, &va), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipConnectRequest(h, g.a2(), g.a1(), 10, &ra), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipConnectPeerRequest(h, g.a2(), g.a1(), 10), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipConnectPeerDone(h, &ra), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipConnectPeerWait(h, &ra), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipDisconnect(h), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipPostSend(h, g.mem.desc(0), g.mem.mh), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipPostRecv(h, g.mem.desc(0), g.mem.mh), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipSendDone(h, &d), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipRecvDone(h, &d), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipSendWait(h, 20, &d), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipRecvWait(h, 20, &d), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipSendNotify(h, nullptr, ignore_desc), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipRecvNotify(h, nullptr, ignore_desc), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipGetViWaitFd(h, &fd), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipQueryViCounters(h, &c), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipDestroyVi(h), VIP_INVALID_PARAMETER);
}

void bad_cq(Good &g, VIP_CQ_HANDLE h) {
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    int fd;
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(g.nic);
    if (h) { // a NULL CQ handle means "no CQ" to VipCreateVi
        EXPECT_RC(VipCreateVi(g.nic.nic, &va, h, nullptr, &vi), VIP_INVALID_PARAMETER);
        EXPECT_RC(VipCreateVi(g.nic.nic, &va, nullptr, h, &vi), VIP_INVALID_PARAMETER);
    }
    EXPECT_RC(VipResizeCQ(h, 32), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipCQDone(h, &vi, &recv), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipCQWait(h, 20, &vi, &recv), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipCQNotify(h, nullptr, ignore_cq), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipGetCQWaitFd(h, &fd), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipDestroyCQ(h), VIP_INVALID_PARAMETER);
}

void bad_ptag(Good &g, VIP_PROTECTION_HANDLE h) {
    VIP_MEM_ATTRIBUTES ma{h, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    VIP_MEM_HANDLE mh;
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(g.nic);
    va.Ptag = h;
    VIP_VI_HANDLE vi;
    EXPECT_RC(VipDestroyPtag(g.nic.nic, h), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipRegisterMem(g.nic.nic, g.mem.base, 4096, &ma, &mh), VIP_INVALID_PTAG);
    EXPECT_RC(VipSetMemAttributes(g.nic.nic, g.mem.base, g.mem.mh, &ma), VIP_INVALID_PTAG);
    EXPECT_RC(VipCreateVi(g.nic.nic, &va, nullptr, nullptr, &vi), VIP_INVALID_PTAG);
    EXPECT_RC(VipSetViAttributes(g.vi, &va), VIP_INVALID_PTAG);
}

void bad_conn(Good &g, VIP_CONN_HANDLE h) {
    EXPECT_RC(VipConnectAccept(h, g.vi), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipConnectReject(h), VIP_INVALID_PARAMETER);
}

void bad_mem(Good &g, VIP_MEM_HANDLE h) {
    VIP_MEM_ATTRIBUTES ma;
    EXPECT_RC(VipDeregisterMem(g.nic.nic, g.mem.base, h), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipQueryMem(g.nic.nic, g.mem.base, h, &ma), VIP_INVALID_PARAMETER);
    ma = VIP_MEM_ATTRIBUTES{g.nic.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    EXPECT_RC(VipSetMemAttributes(g.nic.nic, g.mem.base, h, &ma), VIP_INVALID_PARAMETER);
    EXPECT_RC(VipPostRecv(g.vi, g.mem.desc(0), h), VIP_INVALID_PARAMETER);
}

// Random values; the generation field is made even, which no live handle
// has, so that a value can never name a live object by chance.
std::vector<void *> garbage(uint64_t seed, int n) {
    std::mt19937_64 rng(seed);
    std::vector<void *> out{nullptr, reinterpret_cast<void *>(1), reinterpret_cast<void *>(~0ull)};
    for (int i = 0; i < n; ++i) {
        uint64_t v = rng();
        if (i % 2) v = (uint64_t(0xA1 + i % 5) << 56) | (v & 0x00FFFFFF00000000ull) | (v % 4096);
        out.push_back(reinterpret_cast<void *>(v & ~(1ull << 32)));
    }
    return out;
}

// The checks of a descriptor the post refused as malformed.
void refused(VIP_RETURN rc, VIP_DESCRIPTOR *d, uint32_t error_bit, VIP_VI_HANDLE vi, bool recv) {
    INFO("post returned " << VipReturnString(rc) << ", Status 0x" << std::hex << d->CS.Status);
    CHECK(rc == VIP_DESCRIPTOR_ERROR);
    CHECK((d->CS.Status & VIP_STATUS_DONE));
    CHECK((d->CS.Status & VIP_STATUS_ERROR_MASK) == error_bit);
    VIP_BOOLEAN sq_empty = VIP_FALSE, rq_empty = VIP_FALSE;
    VIP_VI_STATE st;
    REQUIRE(VipQueryVi(vi, &st, nullptr, &sq_empty, &rq_empty) == VIP_SUCCESS);
    CHECK((recv ? rq_empty : sq_empty)); // not queued
    CHECK(st == VIP_STATE_CONNECTED);    // and the connection is unharmed
}

} // namespace

TEST_CASE("bad input: garbage handles get VIP_INVALID_PARAMETER everywhere", "[shm][bad]") {
    Good g;
    for (void *h : garbage(7, 300)) {
        INFO("handle " << h);
        bad_nic(g, h);
        bad_vi(g, h);
        bad_cq(g, h);
        bad_ptag(g, h);
        bad_conn(g, h);
    }
    std::mt19937 rng(8);
    for (int i = 0; i < 300; ++i) {
        VIP_MEM_HANDLE h = static_cast<VIP_MEM_HANDLE>(rng());
        if (h == g.mem.mh) continue;
        INFO("memory handle " << h);
        bad_mem(g, h);
    }
    // Handles of the wrong kind are garbage too.
    bad_nic(g, g.vi);
    bad_vi(g, g.nic.nic);
    bad_cq(g, g.vi);
    bad_conn(g, g.cq);
    // The real objects were not harmed by any of this.
    VIP_VI_STATE st;
    CHECK(VipQueryVi(g.vi, &st, nullptr, nullptr, nullptr) == VIP_SUCCESS);
    VIP_NIC_ATTRIBUTES na;
    CHECK(VipQueryNic(g.nic.nic, &na) == VIP_SUCCESS);
}

TEST_CASE("bad input: handles of destroyed objects are refused", "[shm][bad]") {
    Good g;
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(g.nic);

    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(g.nic.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    REQUIRE(VipDestroyVi(vi) == VIP_SUCCESS);
    // The slot is probably reused at once; the old handle must still be refused.
    VIP_VI_HANDLE again;
    REQUIRE(VipCreateVi(g.nic.nic, &va, nullptr, nullptr, &again) == VIP_SUCCESS);
    bad_vi(g, vi);
    CHECK(VipQueryVi(again, nullptr, nullptr, nullptr, nullptr) == VIP_SUCCESS);
    CHECK(VipDestroyVi(again) == VIP_SUCCESS);

    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(g.nic.nic, 8, &cq) == VIP_SUCCESS);
    REQUIRE(VipDestroyCQ(cq) == VIP_SUCCESS);
    bad_cq(g, cq);

    VIP_PROTECTION_HANDLE p;
    REQUIRE(VipCreatePtag(g.nic.nic, &p) == VIP_SUCCESS);
    REQUIRE(VipDestroyPtag(g.nic.nic, p) == VIP_SUCCESS);
    bad_ptag(g, p);

    VIP_MEM_HANDLE mh;
    VIP_MEM_ATTRIBUTES ma{g.nic.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    REQUIRE(VipRegisterMem(g.nic.nic, g.mem.base + 8192, 4096, &ma, &mh) == VIP_SUCCESS);
    REQUIRE(VipDeregisterMem(g.nic.nic, g.mem.base + 8192, mh) == VIP_SUCCESS);
    bad_mem(g, mh);

    // A connection handle is used up by Accept or Reject.
    {
        std::string disc = vt::unique_disc("r");
        std::vector<uint8_t> local = vt::address(g.nic.nic, disc), remote(256);
        int pid = vt::spawn_child([&] {
            vt::Ep ep;
            if (!ep.open(4096)) return 1;
            return ep.connect(disc, 5000) || ep.err.find("VIP_REJECT") != std::string::npos ? 0 : 2;
        });
        vt::Child child(pid);
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        REQUIRE(VipConnectWait(g.nic.nic, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()), 5000,
                               reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), &ra,
                               &conn) == VIP_SUCCESS);
        REQUIRE(VipConnectReject(conn) == VIP_SUCCESS);
        bad_conn(g, conn);
        CHECK(child.wait(10) == 0);
    }

    // Everything of a closed NIC.
    vt::Nic gone("shm0");
    VIP_VI_ATTRIBUTES ga = vt::vi_attrs(gone);
    VIP_VI_HANDLE gvi;
    VIP_CQ_HANDLE gcq;
    VIP_PROTECTION_HANDLE gp = gone.ptag;
    REQUIRE(VipCreateVi(gone.nic, &ga, nullptr, nullptr, &gvi) == VIP_SUCCESS);
    REQUIRE(VipCreateCQ(gone.nic, 8, &gcq) == VIP_SUCCESS);
    VIP_NIC_HANDLE gn = gone.nic;
    REQUIRE(VipCloseNic(gn) == VIP_SUCCESS);
    gone.nic = nullptr;
    bad_nic(g, gn);
    bad_vi(g, gvi);
    bad_cq(g, gcq);
    bad_ptag(g, gp);
}

TEST_CASE("bad input: a forked child cannot use its parent's handles", "[shm][bad]") {
    Good g;
    int status = vt::run_child([&] {
        int wrong = 0;
        VIP_NIC_ATTRIBUTES na;
        VIP_VI_STATE st;
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN recv;
        wrong += VipQueryNic(g.nic.nic, &na) != VIP_INVALID_PARAMETER;
        wrong += VipQueryVi(g.vi, &st, nullptr, nullptr, nullptr) != VIP_INVALID_PARAMETER;
        wrong += VipPostRecv(g.vi, g.mem.desc(0), g.mem.mh) != VIP_INVALID_PARAMETER;
        wrong += VipCQDone(g.cq, &vi, &recv) != VIP_INVALID_PARAMETER;
        wrong += VipCloseNic(g.nic.nic) != VIP_INVALID_PARAMETER;
        return wrong;
    });
    INFO("child " << vt::status_text(status));
    CHECK(status == 0);
    CHECK(VipQueryVi(g.vi, nullptr, nullptr, nullptr, nullptr) == VIP_SUCCESS);
}

TEST_CASE("bad input: malformed descriptors get the documented code and Status", "[shm][bad]") {
    const VIP_ULONG mtu = 4096;
    vt::Nic na("shm0"), nb("shm0");
    vt::Memory ma(na, 1 << 20, true, true), mb(nb, 1 << 20, true, true);
    VIP_PROTECTION_HANDLE other_ptag;
    REQUIRE(VipCreatePtag(na.nic, &other_ptag) == VIP_SUCCESS);
    vt::Memory foreign(na, 1 << 16, true, true, other_ptag);
    vt::Memory spare(na, 1 << 16);
    vt::Pair p =
        vt::connect_pair(na, nb, vt::vi_attrs(na, VIP_SERVICE_RELIABLE_DELIVERY, mtu, true, true),
                         vt::vi_attrs(nb, VIP_SERVICE_RELIABLE_DELIVERY, mtu, true, true), nullptr,
                         nullptr, nullptr, nullptr, [&](VIP_VI_HANDLE, VIP_VI_HANDLE b) {
                             vt::set_desc(mb.desc(0), mb.base + 65536, mtu, mb.mh);
                             REQUIRE(VipPostRecv(b, mb.desc(0), mb.mh) == VIP_SUCCESS);
                         });
    VIP_VI_HANDLE a = p.a;
    uint8_t *buf = ma.base + 65536;
    uint64_t raddr = reinterpret_cast<uint64_t>(mb.base + 131072);
    // Descriptor slots 64 apart leave room for many segments.
    auto slot = [&](int i) { return reinterpret_cast<VIP_DESCRIPTOR *>(ma.base + i * 2048); };
    auto send = [&](VIP_DESCRIPTOR *d) { return VipPostSend(a, d, ma.mh); };
    auto recv = [&](VIP_DESCRIPTOR *d) { return VipPostRecv(a, d, ma.mh); };

    SECTION("RDMA with SegCount 0") {
        for (uint16_t op : {VIP_CONTROL_OP_RDMAWRITE, VIP_CONTROL_OP_RDMAREAD}) {
            VIP_DESCRIPTOR *d = slot(1);
            vt::set_rdma(d, op, buf, 64, ma.mh, raddr, mb.mh);
            d->CS.SegCount = 0;
            refused(send(d), d, VIP_STATUS_FORMAT_ERROR, a, false);
        }
    }
    SECTION("more segments than MaxSegmentsPerDesc") {
        uint16_t max = static_cast<uint16_t>(na.attrs.MaxSegmentsPerDesc);
        for (uint16_t n : {uint16_t(max + 1), uint16_t(0xFFFF)}) {
            VIP_DESCRIPTOR *d = slot(1);
            memset(d, 0, 2048);
            d->CS.SegCount = n;
            d->CS.Length = 0;
            refused(send(d), d, VIP_STATUS_FORMAT_ERROR, a, false);
            memset(d, 0, 2048);
            d->CS.SegCount = n;
            refused(recv(d), d, VIP_STATUS_FORMAT_ERROR, a, true);
        }
    }
    SECTION("CS.Length of a send differs from its segments") {
        for (uint32_t len : {63u, 65u, 0u}) {
            VIP_DESCRIPTOR *d = slot(1);
            vt::set_desc(d, buf, 64, ma.mh);
            d->CS.Length = len;
            refused(send(d), d, VIP_STATUS_FORMAT_ERROR, a, false);
        }
        VIP_DESCRIPTOR *d = slot(1);
        memset(d, 0, 2048);
        d->CS.SegCount = 3;
        for (int i = 0; i < 3; ++i) {
            (&d->DS[0] + i)->Local.Data.Address = buf + i * 100;
            (&d->DS[0] + i)->Local.Handle = ma.mh;
            (&d->DS[0] + i)->Local.Length = 50;
        }
        d->CS.Length = 100;
        refused(send(d), d, VIP_STATUS_FORMAT_ERROR, a, false);
    }
    SECTION("more than the VI's MaxTransferSize") {
        VIP_DESCRIPTOR *d = slot(1);
        vt::set_desc(d, buf, mtu + 1, ma.mh);
        refused(send(d), d, VIP_STATUS_LENGTH_ERROR, a, false);
        vt::set_desc(d, buf, mtu + 1, ma.mh);
        refused(recv(d), d, VIP_STATUS_LENGTH_ERROR, a, true);
        vt::set_rdma(d, VIP_CONTROL_OP_RDMAWRITE, buf, mtu + 1, ma.mh, raddr, mb.mh);
        refused(send(d), d, VIP_STATUS_LENGTH_ERROR, a, false);
    }
    SECTION("segments outside registered memory") {
        std::vector<uint8_t> heap(4096);
        VIP_MEM_HANDLE dead;
        VIP_MEM_ATTRIBUTES attrs{na.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
        REQUIRE(VipRegisterMem(na.nic, spare.base, 4096, &attrs, &dead) == VIP_SUCCESS);
        REQUIRE(VipDeregisterMem(na.nic, spare.base, dead) == VIP_SUCCESS);
        struct Case {
            void *addr;
            VIP_MEM_HANDLE mh;
            uint32_t len;
            const char *what;
        } cases[] = {
            {heap.data(), ma.mh, 64, "unregistered address"},
            {buf, 0x7ffff, 64, "unknown handle"},
            {spare.base, dead, 64, "deregistered region"},
            {ma.base + ma.size - 32, ma.mh, 64, "across the end of the region"},
            {spare.base, ma.mh, 64, "another region's memory under this handle"},
        };
        for (auto &c : cases) {
            INFO(c.what);
            VIP_DESCRIPTOR *d = slot(1);
            vt::set_desc(d, c.addr, c.len, c.mh);
            refused(send(d), d, VIP_STATUS_PROTECTION_ERROR, a, false);
            vt::set_desc(d, c.addr, c.len, c.mh);
            refused(recv(d), d, VIP_STATUS_PROTECTION_ERROR, a, true);
            vt::set_rdma(d, VIP_CONTROL_OP_RDMAWRITE, c.addr, c.len, c.mh, raddr, mb.mh);
            refused(send(d), d, VIP_STATUS_PROTECTION_ERROR, a, false);
        }
    }
    SECTION("memory of another protection tag") {
        VIP_DESCRIPTOR *d = slot(1);
        vt::set_desc(d, foreign.base, 64, foreign.mh);
        refused(send(d), d, VIP_STATUS_PROTECTION_ERROR, a, false);
        vt::set_desc(d, foreign.base, 64, foreign.mh);
        refused(recv(d), d, VIP_STATUS_PROTECTION_ERROR, a, true);
        // The descriptor itself in such memory cannot be read at all.
        VIP_DESCRIPTOR *fd = reinterpret_cast<VIP_DESCRIPTOR *>(foreign.base);
        vt::set_desc(fd, buf, 64, ma.mh);
        fd->CS.Status = 0x5a5a;
        CHECK(VipPostSend(a, fd, foreign.mh) == VIP_INVALID_PARAMETER);
        CHECK(VipPostRecv(a, fd, foreign.mh) == VIP_INVALID_PARAMETER);
        CHECK(fd->CS.Status == 0x5a5au);
    }
    SECTION("reserved control bits and op 3") {
        for (uint16_t control : {uint16_t(0x0010), uint16_t(0x0100), uint16_t(0x8000),
                                 uint16_t(VIP_CONTROL_OP_RESERVED)}) {
            INFO("Control 0x" << std::hex << control);
            VIP_DESCRIPTOR *d = slot(1);
            vt::set_desc(d, buf, 64, ma.mh, control);
            refused(send(d), d, VIP_STATUS_FORMAT_ERROR, a, false);
            vt::set_desc(d, buf, 64, ma.mh, control);
            refused(recv(d), d, VIP_STATUS_FORMAT_ERROR, a, true);
        }
    }
    SECTION("descriptors that cannot be read") {
        for (size_t off : {size_t(8), size_t(32), size_t(63)}) {
            // Misaligned: written and read back with memcpy, so that only the library
            // could touch it as a descriptor (and must not).
            uint8_t *raw = ma.base + 4096 + off;
            auto *d = reinterpret_cast<VIP_DESCRIPTOR *>(raw);
            vt::set_desc(d, buf, 64, ma.mh);
            const size_t at = offsetof(VIP_DESCRIPTOR, CS) + offsetof(VIP_CONTROL_SEGMENT, Status);
            VIP_UINT32 status = 0x5a5a;
            std::memcpy(raw + at, &status, sizeof status);
            CHECK(send(d) == VIP_INVALID_PARAMETER);
            CHECK(recv(d) == VIP_INVALID_PARAMETER);
            std::memcpy(&status, raw + at, sizeof status);
            CHECK(status == 0x5a5au);
        }
        CHECK(send(nullptr) == VIP_INVALID_PARAMETER);
        CHECK(recv(nullptr) == VIP_INVALID_PARAMETER);
        // In registered memory, but not in MemoryHandle's region.
        VIP_DESCRIPTOR *d = slot(1);
        vt::set_desc(d, buf, 64, ma.mh);
        CHECK(VipPostSend(a, d, spare.mh) == VIP_INVALID_PARAMETER);
        CHECK(VipPostRecv(a, d, spare.mh) == VIP_INVALID_PARAMETER);
        // Straddling the end of a region whose length is not a multiple of 64.
        VIP_MEM_HANDLE odd;
        VIP_MEM_ATTRIBUTES attrs{na.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
        REQUIRE(VipRegisterMem(na.nic, spare.base + 8192, 4096 + 32, &attrs, &odd) == VIP_SUCCESS);
        auto *across = reinterpret_cast<VIP_DESCRIPTOR *>(spare.base + 8192 + 4096);
        vt::set_desc(across, buf, 64, ma.mh);
        CHECK(VipPostSend(a, across, odd) == VIP_INVALID_PARAMETER);
        CHECK(VipPostRecv(a, across, odd) == VIP_INVALID_PARAMETER);
        REQUIRE(VipDeregisterMem(na.nic, spare.base + 8192, odd) == VIP_SUCCESS);
        // Segments running past the end of the region.
        auto *tail = reinterpret_cast<VIP_DESCRIPTOR *>(spare.base + spare.size - 128);
        memset(tail, 0, 128);
        tail->CS.SegCount = 10;
        CHECK(VipPostSend(a, tail, spare.mh) == VIP_INVALID_PARAMETER);
        CHECK(VipPostRecv(a, tail, spare.mh) == VIP_INVALID_PARAMETER);
    }
    SECTION("posting sends on a VI that is not connected") {
        VIP_VI_ATTRIBUTES attrs = vt::vi_attrs(na, VIP_SERVICE_RELIABLE_DELIVERY, mtu, true, true);
        VIP_VI_HANDLE idle;
        REQUIRE(VipCreateVi(na.nic, &attrs, nullptr, nullptr, &idle) == VIP_SUCCESS);
        VIP_DESCRIPTOR *d = slot(1);
        vt::set_desc(d, buf, 64, ma.mh);
        CHECK(VipPostSend(idle, d, ma.mh) == VIP_INVALID_STATE);
        vt::set_rdma(d, VIP_CONTROL_OP_RDMAWRITE, buf, 64, ma.mh, raddr, mb.mh);
        CHECK(VipPostSend(idle, d, ma.mh) == VIP_INVALID_STATE);
        VIP_BOOLEAN empty = VIP_FALSE;
        REQUIRE(VipQueryVi(idle, nullptr, nullptr, &empty, nullptr) == VIP_SUCCESS);
        CHECK(empty);
        vt::set_desc(d, buf, 64, ma.mh);
        CHECK(VipPostRecv(idle, d, ma.mh) == VIP_SUCCESS); // receives may be posted early
        vt::destroy_vi(idle);
    }
    // After any of the above the connection carries a message as before.
    VIP_DESCRIPTOR *d = slot(2);
    vt::fill_pattern(buf, 1000, 5);
    vt::set_desc(d, buf, 1000, ma.mh);
    REQUIRE(VipPostSend(a, d, ma.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *got = nullptr;
    REQUIRE(VipRecvWait(p.b, 5000, &got) == VIP_SUCCESS);
    CHECK(got == mb.desc(0));
    CHECK(got->CS.Length == 1000);
    CHECK(vt::check_pattern(mb.base + 65536, 1000, 5));
    REQUIRE(VipSendWait(a, 5000, &got) == VIP_SUCCESS);
    CHECK(got == d);
    CHECK(VipRecvDone(p.b, &got) == VIP_NOT_DONE);

    // Once the peer is gone, sends and receives are refused.
    vt::destroy_vi(p.b);
    double end = vt::now_ms() + 2000;
    VIP_VI_STATE st = VIP_STATE_CONNECTED;
    while (st == VIP_STATE_CONNECTED && vt::now_ms() < end) {
        VipSendDone(a, &got);
        VipQueryVi(a, &st, nullptr, nullptr, nullptr);
    }
    REQUIRE(st == VIP_STATE_ERROR);
    vt::set_desc(d, buf, 64, ma.mh);
    CHECK(VipPostSend(a, d, ma.mh) == VIP_INVALID_STATE);
    CHECK(VipPostRecv(a, d, ma.mh) == VIP_INVALID_STATE);
    vt::destroy_vi(a);
}

TEST_CASE("shm child: full queue", "[.]") {
    if (!getenv("VT_FRESH")) return; // started by the case below only
    REQUIRE(vt::config_value("MAX_QUEUE") == "4");
    vt::Nic na("shm0"), nb("shm0");
    REQUIRE(na.attrs.MaxDescriptorsPerQueue == 4);
    const uint32_t len = 65536; // SEND-GET: a send stays outstanding until the peer reads it
    vt::Memory ma(na, 8 << 20), mb(nb, 8 << 20);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    auto rbuf = [&](int i) { return mb.base + (1 << 20) + i * len; };
    auto sbuf = [&](int i) { return ma.base + (1 << 20) + i * len; };

    for (int i = 0; i < 4; ++i) {
        vt::set_desc(mb.desc(i), rbuf(i), len, mb.mh);
        REQUIRE(VipPostRecv(p.b, mb.desc(i), mb.mh) == VIP_SUCCESS);
    }
    vt::set_desc(mb.desc(4), rbuf(4), len, mb.mh);
    CHECK(VipPostRecv(p.b, mb.desc(4), mb.mh) == VIP_ERROR_RESOURCE);

    for (int i = 0; i < 4; ++i) {
        vt::fill_pattern(sbuf(i), len, 40 + i);
        vt::set_desc(ma.desc(i), sbuf(i), len, ma.mh, VIP_CONTROL_IMMEDIATE, i);
        REQUIRE(VipPostSend(p.a, ma.desc(i), ma.mh) == VIP_SUCCESS);
    }
    vt::set_desc(ma.desc(4), sbuf(4), len, ma.mh);
    CHECK(VipPostSend(p.a, ma.desc(4), ma.mh) == VIP_ERROR_RESOURCE);

    // Nothing was lost: all four arrive and complete, and the refused ones never do.
    for (int i = 0; i < 4; ++i) {
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipRecvWait(p.b, 5000, &d) == VIP_SUCCESS);
        CHECK(d == mb.desc(i));
        CHECK(d->CS.ImmediateData == uint32_t(i));
        CHECK(vt::check_pattern(rbuf(i), len, 40 + i));
    }
    for (int i = 0; i < 4; ++i) {
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipSendWait(p.a, 5000, &d) == VIP_SUCCESS);
        CHECK(d == ma.desc(i));
    }
    VIP_DESCRIPTOR *d = nullptr;
    CHECK(VipSendDone(p.a, &d) == VIP_NOT_DONE);
    CHECK(VipRecvDone(p.b, &d) == VIP_NOT_DONE);
    // With room again, posting works.
    REQUIRE(VipPostRecv(p.b, mb.desc(4), mb.mh) == VIP_SUCCESS);
    vt::fill_pattern(sbuf(4), len, 44);
    vt::set_desc(ma.desc(4), sbuf(4), len, ma.mh);
    REQUIRE(VipPostSend(p.a, ma.desc(4), ma.mh) == VIP_SUCCESS);
    REQUIRE(VipRecvWait(p.b, 5000, &d) == VIP_SUCCESS);
    CHECK(vt::check_pattern(rbuf(4), len, 44));
    REQUIRE(VipSendWait(p.a, 5000, &d) == VIP_SUCCESS);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("bad input: the fifth outstanding post with VIPL_MAX_QUEUE=4", "[shm][bad]") {
    int status = vt::run_fresh("shm child: full queue", {"VT_FRESH=1", "VIPL_MAX_QUEUE=4"}, 60);
    INFO("fresh process " << vt::status_text(status));
    REQUIRE(status == 0);
}
