// Protection tags, memory registration, and the protection checks made on
// every descriptor a program posts.
#include "support.h"

#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

namespace {

VIP_VI_HANDLE make_vi(const vt::Nic &n, VIP_PROTECTION_HANDLE ptag = nullptr) {
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    if (ptag) va.Ptag = ptag;
    VIP_VI_HANDLE vi = nullptr;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    return vi;
}

bool queue_empty(VIP_VI_HANDLE vi, bool recv) {
    VIP_BOOLEAN sq = VIP_FALSE, rq = VIP_FALSE;
    REQUIRE(VipQueryVi(vi, nullptr, nullptr, &sq, &rq) == VIP_SUCCESS);
    return (recv ? rq : sq) == VIP_TRUE;
}

} // namespace

TEST_CASE("VipCreatePtag makes distinct tags and checks its arguments", "[ptag]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_PROTECTION_HANDLE a = nullptr, b = nullptr;
    REQUIRE(VipCreatePtag(n.nic, &a) == VIP_SUCCESS);
    REQUIRE(VipCreatePtag(n.nic, &b) == VIP_SUCCESS);
    CHECK(a != b);
    CHECK(a != n.ptag);
    CHECK(VipCreatePtag(n.nic, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipCreatePtag(nullptr, &a) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles()) CHECK(VipCreatePtag(h, &a) == VIP_INVALID_PARAMETER);
    CHECK(VipCreatePtag(n.ptag, &a) == VIP_INVALID_PARAMETER);
}

TEST_CASE("VipDestroyPtag refuses bad handles and tags in use", "[ptag]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device), other(device);
    VIP_PROTECTION_HANDLE p;
    REQUIRE(VipCreatePtag(n.nic, &p) == VIP_SUCCESS);

    SECTION("bad handles") {
        CHECK(VipDestroyPtag(nullptr, p) == VIP_INVALID_PARAMETER);
        CHECK(VipDestroyPtag(n.nic, nullptr) == VIP_INVALID_PARAMETER);
        for (VIP_PVOID h : vt::garbage_handles()) {
            CHECK(VipDestroyPtag(h, p) == VIP_INVALID_PARAMETER);
            CHECK(VipDestroyPtag(n.nic, h) == VIP_INVALID_PARAMETER);
        }
        // A tag belongs to the NIC that made it.
        CHECK(VipDestroyPtag(other.nic, p) == VIP_INVALID_PARAMETER);
        CHECK(VipDestroyPtag(n.nic, p) == VIP_SUCCESS);
        CHECK(VipDestroyPtag(n.nic, p) == VIP_INVALID_PARAMETER);
    }
    SECTION("a VI uses the tag") {
        VIP_VI_HANDLE vi = make_vi(n, p);
        CHECK(VipDestroyPtag(n.nic, p) == VIP_INVALID_STATE);
        REQUIRE(VipDestroyVi(vi) == VIP_SUCCESS);
        CHECK(VipDestroyPtag(n.nic, p) == VIP_SUCCESS);
    }
    SECTION("a VI moved to another tag releases the old one") {
        VIP_VI_HANDLE vi = make_vi(n, p);
        VIP_VI_ATTRIBUTES va = vt::vi_attrs(n); // n.ptag
        REQUIRE(VipSetViAttributes(vi, &va) == VIP_SUCCESS);
        CHECK(VipDestroyPtag(n.nic, p) == VIP_SUCCESS);
        CHECK(VipDestroyPtag(n.nic, n.ptag) == VIP_INVALID_STATE);
        REQUIRE(VipDestroyVi(vi) == VIP_SUCCESS);
    }
    SECTION("a memory region uses the tag") {
        vt::Memory m(n, 4096, false, false, p);
        CHECK(VipDestroyPtag(n.nic, p) == VIP_INVALID_STATE);
        VIP_MEM_ATTRIBUTES ma{n.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
        REQUIRE(VipSetMemAttributes(n.nic, m.base, m.mh, &ma) == VIP_SUCCESS);
        CHECK(VipDestroyPtag(n.nic, p) == VIP_SUCCESS);
    }
    SECTION("a deregistered region no longer uses the tag") {
        std::vector<uint8_t> buf(4096);
        VIP_MEM_ATTRIBUTES ma{p, VIP_FALSE, VIP_FALSE, VIP_FALSE};
        VIP_MEM_HANDLE mh;
        REQUIRE(VipRegisterMem(n.nic, buf.data(), buf.size(), &ma, &mh) == VIP_SUCCESS);
        CHECK(VipDestroyPtag(n.nic, p) == VIP_INVALID_STATE);
        REQUIRE(VipDeregisterMem(n.nic, buf.data(), mh) == VIP_SUCCESS);
        CHECK(VipDestroyPtag(n.nic, p) == VIP_SUCCESS);
    }
}

TEST_CASE("VipRegisterMem checks its arguments", "[mem]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device), other(device);
    long page = sysconf(_SC_PAGESIZE);
    auto *p = static_cast<uint8_t *>(
        mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(p != MAP_FAILED);
    // A hole in the middle page.
    REQUIRE(munmap(p + page, page) == 0);
    VIP_MEM_ATTRIBUTES ma{n.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    VIP_MEM_HANDLE mh = 0x5a5a5a5a;

    CHECK(VipRegisterMem(nullptr, p, page, &ma, &mh) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipRegisterMem(h, p, page, &ma, &mh) == VIP_INVALID_PARAMETER);
    CHECK(VipRegisterMem(n.nic, nullptr, page, &ma, &mh) == VIP_INVALID_PARAMETER);
    CHECK(VipRegisterMem(n.nic, p, 0, &ma, &mh) == VIP_INVALID_PARAMETER);
    CHECK(VipRegisterMem(n.nic, p, page, nullptr, &mh) == VIP_INVALID_PARAMETER);
    CHECK(VipRegisterMem(n.nic, p, page, &ma, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipRegisterMem(n.nic, p, 3 * page, &ma, &mh) == VIP_INVALID_PARAMETER);
    CHECK(VipRegisterMem(n.nic, p + page, page, &ma, &mh) == VIP_INVALID_PARAMETER);
    CHECK(VipRegisterMem(n.nic, p + 2 * page, ~0ul - 16, &ma, &mh) == VIP_INVALID_PARAMETER);
    CHECK(mh == 0x5a5a5a5au);

    VIP_MEM_ATTRIBUTES bad = ma;
    for (VIP_PVOID h : vt::garbage_handles(50)) {
        bad.Ptag = h;
        CHECK(VipRegisterMem(n.nic, p, page, &bad, &mh) == VIP_INVALID_PTAG);
    }
    bad.Ptag = nullptr;
    CHECK(VipRegisterMem(n.nic, p, page, &bad, &mh) == VIP_INVALID_PTAG);
    bad.Ptag = other.ptag; // tag of another NIC
    CHECK(VipRegisterMem(n.nic, p, page, &bad, &mh) == VIP_INVALID_PTAG);
    VIP_PROTECTION_HANDLE dead;
    REQUIRE(VipCreatePtag(n.nic, &dead) == VIP_SUCCESS);
    REQUIRE(VipDestroyPtag(n.nic, dead) == VIP_SUCCESS);
    bad.Ptag = dead;
    CHECK(VipRegisterMem(n.nic, p, page, &bad, &mh) == VIP_INVALID_PTAG);

    // Overlapping registrations are separate regions.
    VIP_MEM_HANDLE a, b;
    REQUIRE(VipRegisterMem(n.nic, p, page, &ma, &a) == VIP_SUCCESS);
    REQUIRE(VipRegisterMem(n.nic, p + 64, 128, &ma, &b) == VIP_SUCCESS);
    CHECK(a != b);
    CHECK(VipDeregisterMem(n.nic, p, a) == VIP_SUCCESS);
    CHECK(VipDeregisterMem(n.nic, p + 64, b) == VIP_SUCCESS);
    n.close();
    munmap(p, page);
    munmap(p + 2 * page, page);
}

TEST_CASE("VipDeregisterMem checks its arguments", "[mem]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device), other(device);
    std::vector<uint8_t> buf(8192);
    VIP_MEM_ATTRIBUTES ma{n.ptag, VIP_FALSE, VIP_FALSE, VIP_FALSE};
    VIP_MEM_HANDLE mh;
    REQUIRE(VipRegisterMem(n.nic, buf.data(), buf.size(), &ma, &mh) == VIP_SUCCESS);
    CHECK(VipDeregisterMem(nullptr, buf.data(), mh) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipDeregisterMem(h, buf.data(), mh) == VIP_INVALID_PARAMETER);
    CHECK(VipDeregisterMem(other.nic, buf.data(), mh) == VIP_INVALID_PARAMETER);
    // Not the registered start.
    CHECK(VipDeregisterMem(n.nic, buf.data() + 64, mh) == VIP_INVALID_PARAMETER);
    CHECK(VipDeregisterMem(n.nic, nullptr, mh) == VIP_INVALID_PARAMETER);
    for (VIP_MEM_HANDLE h : {mh ^ 0x80000000u, mh + 1, 0u, 0xffffffffu})
        CHECK(VipDeregisterMem(n.nic, buf.data(), h) == VIP_INVALID_PARAMETER);
    // The region is still registered after all those refusals.
    VIP_MEM_ATTRIBUTES got;
    CHECK(VipQueryMem(n.nic, buf.data(), mh, &got) == VIP_SUCCESS);
    CHECK(VipDeregisterMem(n.nic, buf.data(), mh) == VIP_SUCCESS);
    CHECK(VipDeregisterMem(n.nic, buf.data(), mh) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryMem(n.nic, buf.data(), mh, &got) == VIP_INVALID_PARAMETER);
    // A new region at the same address does not revive the old handle.
    VIP_MEM_HANDLE again;
    REQUIRE(VipRegisterMem(n.nic, buf.data(), buf.size(), &ma, &again) == VIP_SUCCESS);
    CHECK(again != mh);
    CHECK(VipDeregisterMem(n.nic, buf.data(), mh) == VIP_INVALID_PARAMETER);
    CHECK(VipDeregisterMem(n.nic, buf.data(), again) == VIP_SUCCESS);
}

TEST_CASE("Deregistration is refused while a posted descriptor uses the region", "[mem]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory descs(na, 4096), data(na, 4096), extra(na, 4096), idle(na, 4096);
    vt::Memory mb(nb, 4096);
    VIP_DESCRIPTOR *d0 = descs.desc(0);
    // Three segments, the third (beyond DS[1]) in its own region.
    VIP_DESCRIPTOR *d1 = descs.desc(2);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, nullptr,
                                  nullptr, nullptr, [&](VIP_VI_HANDLE a, VIP_VI_HANDLE) {
                                      vt::set_desc(d0, data.base, 256, data.mh);
                                      REQUIRE(VipPostRecv(a, d0, descs.mh) == VIP_SUCCESS);
                                      vt::set_sg(d1, {{data.base + 1024, 8, data.mh},
                                                      {data.base + 2048, 8, data.mh},
                                                      {extra.base, 256, extra.mh}});
                                      REQUIRE(VipPostRecv(a, d1, descs.mh) == VIP_SUCCESS);
                                  });

    CHECK(VipDeregisterMem(na.nic, descs.base, descs.mh) == VIP_INVALID_STATE);
    CHECK(VipDeregisterMem(na.nic, data.base, data.mh) == VIP_INVALID_STATE);
    CHECK(VipDeregisterMem(na.nic, extra.base, extra.mh) == VIP_INVALID_STATE);
    // A region no descriptor uses goes at once.
    CHECK(VipDeregisterMem(na.nic, idle.base, idle.mh) == VIP_SUCCESS);

    // The refused regions are still registered and usable.
    VIP_MEM_ATTRIBUTES got;
    CHECK(VipQueryMem(na.nic, data.base, data.mh, &got) == VIP_SUCCESS);
    memcpy(mb.base + 1024, "first", 6);
    vt::set_desc(mb.desc(0), mb.base + 1024, 6, mb.mh);
    REQUIRE(VipPostSend(p.b, mb.desc(0), mb.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d = nullptr;
    REQUIRE(VipRecvWait(p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d == d0);
    CHECK(memcmp(data.base, "first", 6) == 0);
    REQUIRE(VipSendWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);

    // d0 is done: its data region is still used by d1, but nothing else is.
    CHECK(VipDeregisterMem(na.nic, data.base, data.mh) == VIP_INVALID_STATE);
    CHECK(VipDeregisterMem(na.nic, extra.base, extra.mh) == VIP_INVALID_STATE);
    CHECK(VipDeregisterMem(na.nic, descs.base, descs.mh) == VIP_INVALID_STATE);

    vt::fill_pattern(mb.base + 2048, 272, 7);
    vt::set_desc(mb.desc(1), mb.base + 2048, 272, mb.mh);
    REQUIRE(VipPostSend(p.b, mb.desc(1), mb.mh) == VIP_SUCCESS);
    REQUIRE(VipRecvWait(p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d == d1);
    CHECK(d1->CS.Length == 272);
    REQUIRE(VipSendWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);

    CHECK(VipDeregisterMem(na.nic, extra.base, extra.mh) == VIP_SUCCESS);
    CHECK(VipDeregisterMem(na.nic, data.base, data.mh) == VIP_SUCCESS);
    CHECK(VipDeregisterMem(na.nic, descs.base, descs.mh) == VIP_SUCCESS);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("VipQueryMem reports the region's attributes", "[mem]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device), other(device);
    VIP_PROTECTION_HANDLE p2;
    REQUIRE(VipCreatePtag(n.nic, &p2) == VIP_SUCCESS);
    vt::Memory m(n, 8192, true, false, p2);
    VIP_MEM_ATTRIBUTES got{};
    REQUIRE(VipQueryMem(n.nic, m.base, m.mh, &got) == VIP_SUCCESS);
    CHECK(got.Ptag == p2);
    CHECK(got.EnableRdmaWrite == VIP_TRUE);
    CHECK(got.EnableRdmaRead == VIP_FALSE);

    vt::Memory r(n, 4096, false, true);
    REQUIRE(VipQueryMem(n.nic, r.base, r.mh, &got) == VIP_SUCCESS);
    CHECK(got.Ptag == n.ptag);
    CHECK(got.EnableRdmaWrite == VIP_FALSE);
    CHECK(got.EnableRdmaRead == VIP_TRUE);

    CHECK(VipQueryMem(n.nic, m.base, m.mh, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryMem(nullptr, m.base, m.mh, &got) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipQueryMem(h, m.base, m.mh, &got) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryMem(n.nic, m.base, 0xffffffffu, &got) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryMem(n.nic, m.base + m.size + 4096, m.mh, &got) == VIP_INVALID_PARAMETER);
}

TEST_CASE("VipSetMemAttributes changes tag and RDMA flags", "[mem]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device), other(device);
    VIP_PROTECTION_HANDLE p2;
    REQUIRE(VipCreatePtag(n.nic, &p2) == VIP_SUCCESS);
    vt::Memory m(n, 4096);
    VIP_MEM_ATTRIBUTES set{p2, VIP_TRUE, VIP_TRUE, VIP_FALSE}, got{};
    REQUIRE(VipSetMemAttributes(n.nic, m.base, m.mh, &set) == VIP_SUCCESS);
    REQUIRE(VipQueryMem(n.nic, m.base, m.mh, &got) == VIP_SUCCESS);
    CHECK(got.Ptag == p2);
    CHECK(got.EnableRdmaWrite == VIP_TRUE);
    CHECK(got.EnableRdmaRead == VIP_TRUE);

    // The new tag is what descriptors are checked against.
    VIP_VI_HANDLE vi = make_vi(n); // n.ptag
    vt::set_desc(m.desc(0), nullptr, 0, m.mh);
    CHECK(VipPostRecv(vi, m.desc(0), m.mh) == VIP_INVALID_PARAMETER);
    set = VIP_MEM_ATTRIBUTES{n.ptag, VIP_FALSE, VIP_TRUE, VIP_FALSE};
    REQUIRE(VipSetMemAttributes(n.nic, m.base, m.mh, &set) == VIP_SUCCESS);
    REQUIRE(VipQueryMem(n.nic, m.base, m.mh, &got) == VIP_SUCCESS);
    CHECK(got.Ptag == n.ptag);
    CHECK(got.EnableRdmaWrite == VIP_FALSE);
    CHECK(got.EnableRdmaRead == VIP_TRUE);
    vt::set_desc(m.desc(0), nullptr, 0, m.mh);
    CHECK(VipPostRecv(vi, m.desc(0), m.mh) == VIP_SUCCESS);

    VIP_MEM_ATTRIBUTES bad = set;
    for (VIP_PVOID h : vt::garbage_handles(50)) {
        bad.Ptag = h;
        CHECK(VipSetMemAttributes(n.nic, m.base, m.mh, &bad) == VIP_INVALID_PTAG);
    }
    bad.Ptag = other.ptag;
    CHECK(VipSetMemAttributes(n.nic, m.base, m.mh, &bad) == VIP_INVALID_PTAG);
    CHECK(VipSetMemAttributes(n.nic, m.base, m.mh, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipSetMemAttributes(nullptr, m.base, m.mh, &set) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipSetMemAttributes(h, m.base, m.mh, &set) == VIP_INVALID_PARAMETER);
    CHECK(VipSetMemAttributes(n.nic, m.base, 0xffffffffu, &set) == VIP_INVALID_PARAMETER);
    // None of the refusals changed anything.
    REQUIRE(VipQueryMem(n.nic, m.base, m.mh, &got) == VIP_SUCCESS);
    CHECK(got.Ptag == n.ptag);
    CHECK(got.EnableRdmaWrite == VIP_FALSE);
    CHECK(got.EnableRdmaRead == VIP_TRUE);
    n.close();
}

TEST_CASE("Posting checks where the descriptor lies", "[ptag][post]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device), other(device);
    VIP_PROTECTION_HANDLE p2;
    REQUIRE(VipCreatePtag(n.nic, &p2) == VIP_SUCCESS);
    vt::Memory m(n, 4096), foreign(n, 4096, false, false, p2), remote(other, 4096);
    VIP_VI_HANDLE vi = make_vi(n);
    VIP_DESCRIPTOR *d = m.desc(0);
    vt::set_desc(d, nullptr, 0, m.mh);

    CHECK(VipPostRecv(vi, nullptr, m.mh) == VIP_INVALID_PARAMETER);
    // Not 64-byte aligned.
    auto *unaligned = reinterpret_cast<VIP_DESCRIPTOR *>(m.base + 64 + 32);
    vt::set_desc(unaligned, nullptr, 0, m.mh);
    CHECK(VipPostRecv(vi, unaligned, m.mh) == VIP_INVALID_PARAMETER);
    // Not inside MemoryHandle's region: another region, the end of the region, a bad handle.
    CHECK(VipPostRecv(vi, d, foreign.mh) == VIP_INVALID_PARAMETER);
    auto *tail = reinterpret_cast<VIP_DESCRIPTOR *>(m.base + m.size - 32);
    CHECK(VipPostRecv(vi, tail, m.mh) == VIP_INVALID_PARAMETER);
    CHECK(VipPostRecv(vi, d, 0xffffffffu) == VIP_INVALID_PARAMETER);
    std::vector<uint8_t> unregistered(256);
    auto *loose = reinterpret_cast<VIP_DESCRIPTOR *>(
        (reinterpret_cast<uintptr_t>(unregistered.data()) + 63) & ~uintptr_t(63));
    vt::set_desc(loose, nullptr, 0, m.mh);
    CHECK(VipPostRecv(vi, loose, m.mh) == VIP_INVALID_PARAMETER);
    // The descriptor's region carries another ptag than the VI.
    VIP_DESCRIPTOR *fd = foreign.desc(0);
    vt::set_desc(fd, nullptr, 0, foreign.mh);
    CHECK(VipPostRecv(vi, fd, foreign.mh) == VIP_INVALID_PARAMETER);
    // Segments beyond DS[1] run past the end of the region.
    auto *last = reinterpret_cast<VIP_DESCRIPTOR *>(m.base + m.size - 64);
    memset(last, 0, 64);
    last->CS.SegCount = 4;
    CHECK(VipPostRecv(vi, last, m.mh) == VIP_INVALID_PARAMETER);

    CHECK(queue_empty(vi, true));
    CHECK(VipPostRecv(vi, d, m.mh) == VIP_SUCCESS);
    CHECK_FALSE(queue_empty(vi, true));
    n.close();
}

TEST_CASE("Every data segment is checked against its region and the VI's ptag", "[ptag][post]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_PROTECTION_HANDLE p2;
    REQUIRE(VipCreatePtag(n.nic, &p2) == VIP_SUCCESS);
    vt::Memory m(n, 8192), foreign(n, 4096, false, false, p2);
    VIP_VI_HANDLE vi = make_vi(n);
    VIP_DESCRIPTOR *d = m.desc(0);
    uint8_t *buf = m.base + 4096;

    auto refused = [&](const std::vector<vt::Seg> &segs) {
        vt::set_sg(d, segs);
        d->CS.Status = 0;
        VIP_RETURN rc = VipPostRecv(vi, d, m.mh);
        CHECK(rc == VIP_DESCRIPTOR_ERROR);
        CHECK((d->CS.Status & VIP_STATUS_DONE) != 0);
        CHECK((d->CS.Status & VIP_STATUS_PROTECTION_ERROR) != 0);
        CHECK(queue_empty(vi, true));
    };
    SECTION("segment in a region of another ptag") {
        refused({{foreign.base, 64, foreign.mh}});
    }
    SECTION("segment past the end of its region") {
        refused({{buf, 4097, m.mh}});
    }
    SECTION("segment before the start of its region") {
        refused({{m.base - 64, 128, m.mh}});
    }
    SECTION("segment with an unknown handle") {
        refused({{buf, 64, 0xfffffff0u}});
    }
    SECTION("segment named by another region's handle") {
        refused({{buf, 64, foreign.mh}});
    }
    SECTION("bad segment after good ones") {
        std::vector<vt::Seg> segs = {{buf, 16, m.mh}, {buf + 16, 16, m.mh}, {buf + 32, 16, m.mh}};
        segs.push_back({foreign.base, 16, foreign.mh});
        refused(segs);
    }
    SECTION("VI with another ptag than the region") {
        VIP_VI_HANDLE v2 = make_vi(n, p2);
        // Descriptor and buffer in p2 memory: accepted.
        VIP_DESCRIPTOR *fd = foreign.desc(0);
        vt::set_desc(fd, foreign.base + 1024, 64, foreign.mh);
        CHECK(VipPostRecv(v2, fd, foreign.mh) == VIP_SUCCESS);
        // Descriptor in p2 memory, buffer in n.ptag memory: protection error.
        VIP_DESCRIPTOR *fd2 = foreign.desc(1);
        vt::set_desc(fd2, buf, 64, m.mh);
        CHECK(VipPostRecv(v2, fd2, foreign.mh) == VIP_DESCRIPTOR_ERROR);
        CHECK((fd2->CS.Status & VIP_STATUS_PROTECTION_ERROR) != 0);
    }
    SECTION("the whole region is accepted") {
        vt::set_desc(d, buf, 4096, m.mh);
        CHECK(VipPostRecv(vi, d, m.mh) == VIP_SUCCESS);
    }
    n.close();
}

TEST_CASE("A VI moved to another ptag uses that ptag's memory", "[ptag][post]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_PROTECTION_HANDLE p2;
    REQUIRE(VipCreatePtag(n.nic, &p2) == VIP_SUCCESS);
    vt::Memory m(n, 4096), foreign(n, 4096, false, false, p2);
    VIP_VI_HANDLE vi = make_vi(n);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    va.Ptag = p2;
    REQUIRE(VipSetViAttributes(vi, &va) == VIP_SUCCESS);
    vt::set_desc(m.desc(0), m.base + 1024, 64, m.mh);
    CHECK(VipPostRecv(vi, m.desc(0), m.mh) == VIP_INVALID_PARAMETER);
    vt::set_desc(foreign.desc(0), m.base + 1024, 64, m.mh);
    CHECK(VipPostRecv(vi, foreign.desc(0), foreign.mh) == VIP_DESCRIPTOR_ERROR);
    CHECK((foreign.desc(0)->CS.Status & VIP_STATUS_PROTECTION_ERROR) != 0);
    vt::set_desc(foreign.desc(1), foreign.base + 1024, 64, foreign.mh);
    CHECK(VipPostRecv(vi, foreign.desc(1), foreign.mh) == VIP_SUCCESS);
    n.close();
}

TEST_CASE("Sends are checked against the ptag like receives", "[ptag][post]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    VIP_PROTECTION_HANDLE p2;
    REQUIRE(VipCreatePtag(nb.nic, &p2) == VIP_SUCCESS);
    vt::Memory ma(na, 4096), mb(nb, 8192), foreign(nb, 4096, false, false, p2);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    // Descriptor in memory of another ptag.
    vt::set_desc(foreign.desc(0), mb.base + 4096, 8, mb.mh);
    CHECK(VipPostSend(p.b, foreign.desc(0), foreign.mh) == VIP_INVALID_PARAMETER);
    // Data in memory of another ptag.
    vt::set_desc(mb.desc(0), foreign.base + 1024, 8, foreign.mh);
    CHECK(VipPostSend(p.b, mb.desc(0), mb.mh) == VIP_DESCRIPTOR_ERROR);
    CHECK((mb.desc(0)->CS.Status & VIP_STATUS_DONE) != 0);
    CHECK((mb.desc(0)->CS.Status & VIP_STATUS_PROTECTION_ERROR) != 0);
    CHECK(queue_empty(p.b, false));
    // Nothing was sent: the connection is intact and the next send arrives.
    vt::set_desc(ma.desc(0), ma.base + 1024, 64, ma.mh);
    REQUIRE(VipPostRecv(p.a, ma.desc(0), ma.mh) == VIP_SUCCESS);
    memcpy(mb.base + 4096, "intact", 7);
    vt::set_desc(mb.desc(1), mb.base + 4096, 7, mb.mh);
    REQUIRE(VipPostSend(p.b, mb.desc(1), mb.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d;
    REQUIRE(VipRecvWait(p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d->CS.Length == 7);
    CHECK(memcmp(ma.base + 1024, "intact", 7) == 0);
    REQUIRE(VipSendWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d == mb.desc(1));
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}
