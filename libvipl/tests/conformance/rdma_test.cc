// RDMA write (with and without immediate data) and RDMA read, and the
// target's protection rules: region bounds, ptag, and the enable flags of
// both the region and the target VI.
#include "support.h"

#include <cstring>
#include <memory>

namespace {

const char *level_name(VIP_RELIABILITY_LEVEL l) {
    return l == VIP_SERVICE_UNRELIABLE          ? "unreliable"
           : l == VIP_SERVICE_RELIABLE_DELIVERY ? "reliable delivery"
                                                : "reliable reception";
}

// An initiator (i) and a target (t), connected.  The target's region `tm`
// has the given RDMA flags; `tv_*` are the target VI's flags.
struct Rdma {
    vt::ErrorLog terrors, ierrors;
    vt::Nic ni, nt;
    VIP_PROTECTION_HANDLE tptag2 = nullptr;
    vt::Memory im, tdesc;
    std::unique_ptr<vt::Memory> tm;
    vt::Pair p;
    VIP_VI_HANDLE iv = nullptr, tv = nullptr;

    Rdma(const std::string &device, VIP_RELIABILITY_LEVEL level, bool tv_write, bool tv_read,
         bool region_write, bool region_read, bool region_other_ptag = false)
        : ni(device), nt(device), im(ni, 4 << 20), tdesc(nt, 1 << 16) {
        terrors.install(nt.nic);
        ierrors.install(ni.nic);
        REQUIRE(VipCreatePtag(nt.nic, &tptag2) == VIP_SUCCESS);
        tm = std::make_unique<vt::Memory>(nt, 4 << 20, region_write, region_read,
                                          region_other_ptag ? tptag2 : nullptr);
        p = vt::connect_pair(nt, ni, vt::vi_attrs(nt, level, 0, tv_write, tv_read),
                             vt::vi_attrs(ni, level));
        tv = p.a;
        iv = p.b;
    }
    ~Rdma() {
        vt::destroy_vi(p.a);
        vt::destroy_vi(p.b);
    }
    uint64_t taddr(size_t off) const { return reinterpret_cast<uint64_t>(tm->base + off); }
};

VIP_RETURN post_and_wait(VIP_VI_HANDLE vi, vt::Memory &m, VIP_DESCRIPTOR *d, VIP_DESCRIPTOR **out) {
    VIP_RETURN rc = VipPostSend(vi, d, m.mh);
    if (rc != VIP_SUCCESS) return rc;
    return VipSendWait(vi, vt::kWaitMs, out);
}

} // namespace

TEST_CASE("RDMA write without immediate data", "[rdma]") {
    std::string device = VT_DEVICE();
    for (VIP_RELIABILITY_LEVEL level :
         {VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION}) {
        INFO(level_name(level));
        Rdma r(device, level, true, false, true, false);
        // A receive posted at the target is not consumed by a write without immediate data.
        vt::set_desc(r.tdesc.desc(0), r.tdesc.base + 8192, 1024, r.tdesc.mh);
        REQUIRE(VipPostRecv(r.tv, r.tdesc.desc(0), r.tdesc.mh) == VIP_SUCCESS);
        vt::Pump pump(r.tv);
        memset(r.tm->base, 0xcc, 1 << 20);
        for (uint32_t len : {1u, 100u, 4096u, 300000u}) {
            INFO("length " << len);
            vt::fill_pattern(r.im.base + 65536, len, len);
            size_t off = 1000 + len % 7;
            vt::set_rdma(r.im.desc(0), VIP_CONTROL_OP_RDMAWRITE, r.im.base + 65536, len, r.im.mh,
                         r.taddr(off), r.tm->mh);
            VIP_DESCRIPTOR *d = nullptr;
            REQUIRE(post_and_wait(r.iv, r.im, r.im.desc(0), &d) == VIP_SUCCESS);
            CHECK(d == r.im.desc(0));
            CHECK(d->CS.Status == (VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_WRITE));
            CHECK(vt::check_pattern(r.tm->base + off, len, len));
            CHECK(r.tm->base[off - 1] == 0xcc);
            CHECK(r.tm->base[off + len] == 0xcc);
            memset(r.tm->base + off, 0xcc, len);
        }
        VIP_DESCRIPTOR *d;
        CHECK(VipRecvWait(r.tv, 50, &d) == VIP_TIMEOUT);
        CHECK(pump.stray == 0);
    }
}

namespace {

// An RDMA write with immediate data into a target that posted `recv_room`
// bytes of receive buffer (0: a descriptor without data segments).
void write_with_immediate(const std::string &device, VIP_RELIABILITY_LEVEL level,
                          uint32_t recv_room) {
    INFO(level_name(level) << ", receive descriptor with " << recv_room << " bytes");
    Rdma r(device, level, true, false, true, false);
    memset(r.tdesc.base + 8192, 0x11, 8192);
    vt::set_desc(r.tdesc.desc(0), recv_room ? r.tdesc.base + 8192 : nullptr, recv_room, r.tdesc.mh);
    REQUIRE(VipPostRecv(r.tv, r.tdesc.desc(0), r.tdesc.mh) == VIP_SUCCESS);
    uint32_t len = 5000;
    vt::fill_pattern(r.im.base + 65536, len, 9);
    vt::set_rdma(r.im.desc(0), VIP_CONTROL_OP_RDMAWRITE, r.im.base + 65536, len, r.im.mh,
                 r.taddr(4096), r.tm->mh, VIP_CONTROL_IMMEDIATE, 0xc0ffee00);
    REQUIRE(VipPostSend(r.iv, r.im.desc(0), r.im.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d = nullptr;
    VIP_RETURN rc = VipRecvWait(r.tv, vt::kWaitMs, &d);
    REQUIRE(d != nullptr);
    INFO("receive status 0x" << std::hex << d->CS.Status);
    CHECK(rc == VIP_SUCCESS);
    CHECK(d == r.tdesc.desc(0));
    CHECK(d->CS.Status ==
          (VIP_STATUS_DONE | VIP_STATUS_OP_REMOTE_RDMA_WRITE | VIP_STATUS_IMMEDIATE));
    CHECK(d->CS.ImmediateData == 0xc0ffee00u);
    CHECK(d->CS.Length == len);
    CHECK(vt::check_pattern(r.tm->base + 4096, len, 9));
    // The receive buffer itself is not written.
    CHECK(r.tdesc.base[8192] == 0x11);
    d = nullptr;
    CHECK(VipSendWait(r.iv, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d == r.im.desc(0));
    CHECK(r.im.desc(0)->CS.Status == (VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_WRITE));
    CHECK(vt::vi_state(r.tv) == VIP_STATE_CONNECTED);
}

} // namespace

TEST_CASE("RDMA write with immediate data consumes a receive at the target", "[rdma]") {
    std::string device = VT_DEVICE();
    for (VIP_RELIABILITY_LEVEL level :
         {VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION})
        write_with_immediate(device, level, 8192);
}

TEST_CASE("RDMA write with immediate data needs no room in the receive descriptor", "[rdma]") {
    std::string device = VT_DEVICE();
    // The data goes to the RDMA target region; the receive descriptor only
    // carries the immediate data, so its buffer size does not matter.
    for (VIP_RELIABILITY_LEVEL level :
         {VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION}) {
        write_with_immediate(device, level, 0);
        write_with_immediate(device, level, 1024);
    }
}

TEST_CASE("RDMA read", "[rdma]") {
    std::string device = VT_DEVICE();
    for (VIP_RELIABILITY_LEVEL level :
         {VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION}) {
        INFO(level_name(level));
        Rdma r(device, level, false, true, false, true);
        vt::Pump pump(r.tv);
        for (uint32_t len : {1u, 777u, 65536u, 1000000u}) {
            INFO("length " << len);
            vt::fill_pattern(r.tm->base + 128, len, len + 1);
            memset(r.im.base + 65536, 0, len + 1);
            vt::set_rdma(r.im.desc(0), VIP_CONTROL_OP_RDMAREAD, r.im.base + 65536, len, r.im.mh,
                         r.taddr(128), r.tm->mh);
            VIP_DESCRIPTOR *d = nullptr;
            REQUIRE(post_and_wait(r.iv, r.im, r.im.desc(0), &d) == VIP_SUCCESS);
            CHECK(d->CS.Status == (VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_READ));
            CHECK(d->CS.Length == len);
            CHECK(vt::check_pattern(r.im.base + 65536, len, len + 1));
            CHECK(r.im.base[65536 + len] == 0);
        }
    }
}

TEST_CASE("RDMA gathers and scatters local segments", "[rdma]") {
    std::string device = VT_DEVICE();
    Rdma r(device, VIP_SERVICE_RELIABLE_DELIVERY, true, true, true, true);
    vt::Pump pump(r.tv);
    std::vector<vt::Seg> segs = {{r.im.base + 65536, 100, r.im.mh},
                                 {r.im.base + 80000, 3, r.im.mh},
                                 {r.im.base + 90000, 2000, r.im.mh},
                                 {r.im.base + 100000, 60, r.im.mh}};
    uint32_t total = 2163;
    std::vector<uint8_t> expect;
    for (size_t i = 0; i < segs.size(); ++i) {
        auto *p = static_cast<uint8_t *>(segs[i].addr);
        vt::fill_pattern(p, segs[i].len, 50 + static_cast<uint32_t>(i));
        expect.insert(expect.end(), p, p + segs[i].len);
    }
    vt::set_rdma_sg(r.im.desc(0), VIP_CONTROL_OP_RDMAWRITE, r.taddr(256), r.tm->mh, segs);
    VIP_DESCRIPTOR *d;
    REQUIRE(post_and_wait(r.iv, r.im, r.im.desc(0), &d) == VIP_SUCCESS);
    CHECK(memcmp(r.tm->base + 256, expect.data(), total) == 0);

    // Read it back into the same segments, cleared.
    for (auto &s : segs) memset(s.addr, 0, s.len);
    vt::set_rdma_sg(r.im.desc(2), VIP_CONTROL_OP_RDMAREAD, r.taddr(256), r.tm->mh, segs);
    REQUIRE(post_and_wait(r.iv, r.im, r.im.desc(2), &d) == VIP_SUCCESS);
    CHECK(d->CS.Length == total);
    std::vector<uint8_t> back;
    for (auto &s : segs)
        back.insert(back.end(), static_cast<uint8_t *>(s.addr),
                    static_cast<uint8_t *>(s.addr) + s.len);
    CHECK(back == expect);
}

namespace {

enum class Violation {
    past_end,
    before_start,
    unknown_handle,
    other_region_handle,
    region_of_other_ptag,
    region_not_enabled,
    vi_not_enabled,
};

const char *violation_name(Violation v) {
    switch (v) {
    case Violation::past_end:
        return "range runs past the end of the region";
    case Violation::before_start:
        return "range starts before the region";
    case Violation::unknown_handle:
        return "unknown region handle";
    case Violation::other_region_handle:
        return "handle of another region";
    case Violation::region_of_other_ptag:
        return "region of another ptag than the target VI";
    case Violation::region_not_enabled:
        return "region does not enable the operation";
    case Violation::vi_not_enabled:
        return "target VI does not enable the operation";
    }
    return "?";
}

void check_violation(const std::string &device, VIP_RELIABILITY_LEVEL level, bool write,
                     Violation v) {
    INFO(level_name(level) << ", RDMA " << (write ? "write" : "read") << ": " << violation_name(v));
    bool vi_flag = v != Violation::vi_not_enabled;
    bool region_flag = v != Violation::region_not_enabled;
    Rdma r(device, level, write && vi_flag, !write && vi_flag, write && region_flag,
           !write && region_flag, v == Violation::region_of_other_ptag);
    // Another region of the target, right after the target region.
    vt::Memory other(r.nt, 4096, true, true);
    const size_t len = 4096;
    size_t off = 8192;
    VIP_MEM_HANDLE rmh = r.tm->mh;
    uint64_t raddr = r.taddr(off);
    switch (v) {
    case Violation::past_end:
        raddr = r.taddr(r.tm->size - len + 1);
        break;
    case Violation::before_start:
        raddr = r.taddr(0) - 64;
        break;
    case Violation::unknown_handle:
        rmh = 0xfffffff0u;
        break;
    case Violation::other_region_handle:
        rmh = other.mh;
        break;
    default:
        break;
    }
    vt::fill_pattern(r.tm->base, r.tm->size, 4242);
    vt::fill_pattern(other.base, other.size, 4343);
    vt::fill_pattern(r.im.base + 65536, len, 1);
    // A receive at the initiator shows what happens to its queues.
    vt::set_desc(r.im.desc(4), r.im.base + 200000, 64, r.im.mh);
    REQUIRE(VipPostRecv(r.iv, r.im.desc(4), r.im.mh) == VIP_SUCCESS);

    vt::set_rdma(r.im.desc(0), write ? VIP_CONTROL_OP_RDMAWRITE : VIP_CONTROL_OP_RDMAREAD,
                 r.im.base + 65536, len, r.im.mh, raddr, rmh);
    {
        vt::Pump pump(r.tv);
        REQUIRE(VipPostSend(r.iv, r.im.desc(0), r.im.mh) == VIP_SUCCESS);
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipSendWait(r.iv, vt::kWaitMs, &d) == VIP_DESCRIPTOR_ERROR);
        CHECK(d == r.im.desc(0));
        CHECK((d->CS.Status & VIP_STATUS_DONE) != 0);
        CHECK((d->CS.Status & VIP_STATUS_RDMA_PROT_ERROR) != 0);
        CHECK((d->CS.Status & VIP_STATUS_OP_MASK) ==
              (write ? VIP_STATUS_OP_RDMA_WRITE : VIP_STATUS_OP_RDMA_READ));

        // The target hears about it.
        VIP_ERROR_CODE code = write ? VIP_ERROR_RDMAW_PROT : VIP_ERROR_RDMAR_PROT;
        VIP_ERROR_DESCRIPTOR e{};
        CHECK(r.terrors.wait_for(code, r.tv, vt::kWaitMs, &e));
        CHECK(e.NicHandle == r.nt.nic);
        CHECK(e.ViHandle == r.tv);
        CHECK(e.ResourceCode == VIP_RESOURCE_VI);
        CHECK(e.ErrorCode == code);
        CHECK(pump.stray == 0);
    }
    // Target memory is untouched.
    CHECK(vt::check_pattern(r.tm->base, r.tm->size, 4242));
    CHECK(vt::check_pattern(other.base, other.size, 4343));

    if (level == VIP_SERVICE_UNRELIABLE) {
        // The connection stays up: a good write goes through.
        CHECK(vt::vi_state(r.iv) == VIP_STATE_CONNECTED);
        CHECK(vt::vi_state(r.tv) == VIP_STATE_CONNECTED);
        if (v != Violation::vi_not_enabled && v != Violation::region_not_enabled &&
            v != Violation::region_of_other_ptag) {
            vt::Pump pump(r.tv);
            vt::set_rdma(r.im.desc(1), VIP_CONTROL_OP_RDMAWRITE, r.im.base + 65536, len, r.im.mh,
                         r.taddr(off), r.tm->mh);
            VIP_DESCRIPTOR *d;
            CHECK(post_and_wait(r.iv, r.im, r.im.desc(1), &d) == VIP_SUCCESS);
            CHECK(vt::check_pattern(r.tm->base + off, len, 1));
        }
    } else {
        // The connection breaks: both sides in Error, the initiator's receive flushed.
        std::vector<vt::Taken> taken;
        CHECK(vt::drive_to_state(r.iv, VIP_STATE_ERROR, vt::kWaitMs, &taken));
        CHECK(vt::drive_to_state(r.tv, VIP_STATE_ERROR, vt::kWaitMs));
        vt::drive_until(
            r.iv, [&] { return !taken.empty(); }, 2000, &taken);
        REQUIRE(taken.size() == 1);
        CHECK(taken[0].recv);
        CHECK(taken[0].rc == VIP_DESCRIPTOR_ERROR);
        CHECK((taken[0].desc->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR) != 0);
    }
}

} // namespace

TEST_CASE("RDMA write protection violations", "[rdma][protection]") {
    std::string device = VT_DEVICE();
    for (VIP_RELIABILITY_LEVEL level :
         {VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION})
        for (Violation v : {Violation::past_end, Violation::before_start, Violation::unknown_handle,
                            Violation::other_region_handle, Violation::region_of_other_ptag,
                            Violation::region_not_enabled, Violation::vi_not_enabled})
            check_violation(device, level, true, v);
}

TEST_CASE("RDMA read protection violations", "[rdma][protection]") {
    std::string device = VT_DEVICE();
    for (VIP_RELIABILITY_LEVEL level :
         {VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION})
        for (Violation v : {Violation::past_end, Violation::before_start, Violation::unknown_handle,
                            Violation::other_region_handle, Violation::region_of_other_ptag,
                            Violation::region_not_enabled, Violation::vi_not_enabled})
            check_violation(device, level, false, v);
}

TEST_CASE("An RDMA write with immediate data that violates protection consumes nothing",
          "[rdma][protection]") {
    std::string device = VT_DEVICE();
    Rdma r(device, VIP_SERVICE_UNRELIABLE, true, false, false, false);
    vt::set_desc(r.tdesc.desc(0), r.tdesc.base + 8192, 1024, r.tdesc.mh);
    REQUIRE(VipPostRecv(r.tv, r.tdesc.desc(0), r.tdesc.mh) == VIP_SUCCESS);
    vt::fill_pattern(r.tm->base, 65536, 5);
    vt::set_rdma(r.im.desc(0), VIP_CONTROL_OP_RDMAWRITE, r.im.base + 65536, 100, r.im.mh,
                 r.taddr(0), r.tm->mh, VIP_CONTROL_IMMEDIATE, 7);
    {
        vt::Pump pump(r.tv);
        VIP_DESCRIPTOR *d;
        REQUIRE(post_and_wait(r.iv, r.im, r.im.desc(0), &d) == VIP_DESCRIPTOR_ERROR);
        CHECK((d->CS.Status & VIP_STATUS_RDMA_PROT_ERROR) != 0);
        CHECK(r.terrors.wait_for(VIP_ERROR_RDMAW_PROT, r.tv, vt::kWaitMs));
    }
    VIP_DESCRIPTOR *d;
    CHECK(VipRecvWait(r.tv, 50, &d) == VIP_TIMEOUT);
    CHECK(vt::check_pattern(r.tm->base, 65536, 5));
}

TEST_CASE("The initiator's own segments are checked when an RDMA is posted", "[rdma][post]") {
    std::string device = VT_DEVICE();
    Rdma r(device, VIP_SERVICE_RELIABLE_DELIVERY, true, true, true, true);
    VIP_PROTECTION_HANDLE p2;
    REQUIRE(VipCreatePtag(r.ni.nic, &p2) == VIP_SUCCESS);
    vt::Memory foreign(r.ni, 4096, false, false, p2);
    for (uint16_t op : {VIP_CONTROL_OP_RDMAWRITE, VIP_CONTROL_OP_RDMAREAD}) {
        vt::set_rdma(r.im.desc(0), op, foreign.base, 64, foreign.mh, r.taddr(0), r.tm->mh);
        CHECK(VipPostSend(r.iv, r.im.desc(0), r.im.mh) == VIP_DESCRIPTOR_ERROR);
        CHECK((r.im.desc(0)->CS.Status & VIP_STATUS_PROTECTION_ERROR) != 0);
        vt::set_rdma(r.im.desc(0), op, r.im.base + r.im.size - 32, 64, r.im.mh, r.taddr(0),
                     r.tm->mh);
        CHECK(VipPostSend(r.iv, r.im.desc(0), r.im.mh) == VIP_DESCRIPTOR_ERROR);
        CHECK((r.im.desc(0)->CS.Status & VIP_STATUS_PROTECTION_ERROR) != 0);
    }
    CHECK(vt::vi_state(r.iv) == VIP_STATE_CONNECTED);
}

TEST_CASE("RDMA read does not succeed on an unreliable connection", "[rdma]") {
    std::string device = VT_DEVICE();
    // Unreliable VIs cannot enable RDMA read (VIP_INVALID_RDMAREAD), so no
    // target can serve it; an RDMA read posted anyway must not succeed.
    Rdma r(device, VIP_SERVICE_UNRELIABLE, true, false, true, true);
    vt::fill_pattern(r.tm->base, 4096, 3);
    vt::set_rdma(r.im.desc(0), VIP_CONTROL_OP_RDMAREAD, r.im.base + 65536, 64, r.im.mh, r.taddr(0),
                 r.tm->mh);
    vt::Pump pump(r.tv);
    VIP_DESCRIPTOR *d = nullptr;
    VIP_RETURN rc = post_and_wait(r.iv, r.im, r.im.desc(0), &d);
    CHECK(rc != VIP_SUCCESS);
    if (rc == VIP_DESCRIPTOR_ERROR) CHECK((r.im.desc(0)->CS.Status & VIP_STATUS_ERROR_MASK) != 0);
    CHECK_FALSE(vt::check_pattern(r.im.base + 65536, 64, 3));
}
