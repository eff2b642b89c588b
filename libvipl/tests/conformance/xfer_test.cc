// The data path: VipPostSend/Recv, VipSendDone/Wait, VipRecvDone/Wait,
// VipSendNotify/RecvNotify, descriptor formats and completion order.
#include "support.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

const char *level_name(VIP_RELIABILITY_LEVEL l) {
    return l == VIP_SERVICE_UNRELIABLE          ? "unreliable"
           : l == VIP_SERVICE_RELIABLE_DELIVERY ? "reliable delivery"
                                                : "reliable reception";
}

// A connected pair with generous memory on both sides.
struct Link {
    vt::Nic na, nb;
    vt::Memory ma, mb;
    vt::Pair p;
    Link(const std::string &device, VIP_RELIABILITY_LEVEL level, size_t bytes = 4 << 20,
         VIP_ULONG mtu = 0)
        : na(device), nb(device), ma(na, bytes), mb(nb, bytes) {
        p = vt::connect_pair(na, nb, vt::vi_attrs(na, level, mtu), vt::vi_attrs(nb, level, mtu));
    }
    ~Link() {
        vt::destroy_vi(p.a);
        vt::destroy_vi(p.b);
    }
};

} // namespace

TEST_CASE("Messages of every size arrive intact at every reliability level", "[xfer]") {
    std::string device = VT_DEVICE();
    for (VIP_RELIABILITY_LEVEL level :
         {VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION}) {
        INFO(level_name(level));
        Link l(device, level);
        uint8_t *rbuf = l.ma.base + (1 << 20), *sbuf = l.mb.base + (1 << 20);
        uint32_t seed = 10;
        for (uint32_t len : {0u, 1u, 7u, 63u, 64u, 511u, 512u, 513u, 4096u, 65536u, 1000000u}) {
            INFO("length " << len);
            const uint32_t room = 1100000;
            memset(rbuf, 0xee, room + 16);
            vt::set_desc(l.ma.desc(0), rbuf, room, l.ma.mh);
            REQUIRE(VipPostRecv(l.p.a, l.ma.desc(0), l.ma.mh) == VIP_SUCCESS);
            vt::fill_pattern(sbuf, len, ++seed);
            vt::set_desc(l.mb.desc(0), sbuf, len, l.mb.mh);
            REQUIRE(VipPostSend(l.p.b, l.mb.desc(0), l.mb.mh) == VIP_SUCCESS);
            VIP_DESCRIPTOR *d = nullptr;
            REQUIRE(VipRecvWait(l.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
            CHECK(d == l.ma.desc(0));
            CHECK(d->CS.Status == (VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE));
            CHECK(d->CS.Length == len);
            CHECK(vt::check_pattern(rbuf, len, seed));
            // Bytes past the message are untouched.
            CHECK(rbuf[len] == 0xee);
            CHECK(rbuf[room - 1] == 0xee);
            REQUIRE(VipSendWait(l.p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
            CHECK(d == l.mb.desc(0));
            CHECK(d->CS.Status == (VIP_STATUS_DONE | VIP_STATUS_OP_SEND));
            CHECK(d->CS.Length == len);
        }
    }
}

TEST_CASE("Scatter and gather across many segments and regions", "[xfer]") {
    std::string device = VT_DEVICE();
    for (uint32_t scale : {1u, 300u}) { // small messages and large ones
        INFO("scale " << scale);
        vt::Nic na(device), nb(device);
        vt::Memory ma(na, 4 << 20), mb(nb, 4 << 20), mb2(nb, 1 << 20), ma2(na, 1 << 20);
        vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
        // Five send segments, the last three after DS[1]; two in a second region.
        std::vector<uint32_t> slen = {10 * scale, 1 * scale, 33 * scale, 64 * scale, 17 * scale};
        std::vector<vt::Seg> ssegs;
        uint8_t *cursor = mb.base + 65536;
        for (size_t i = 0; i < slen.size(); ++i) {
            uint8_t *at = i % 2 ? mb2.base + 4096 + 65536 * i : cursor;
            vt::fill_pattern(at, slen[i], 100 + static_cast<uint32_t>(i));
            ssegs.push_back({at, slen[i], i % 2 ? mb2.mh : mb.mh});
            cursor += slen[i] + 100;
        }
        uint32_t total = 0;
        for (uint32_t s : slen) total += s;
        // Four receive segments of other sizes, room for total + 5 bytes.
        std::vector<uint32_t> rlen = {3 * scale, 50 * scale, 2 * scale, total - 55 * scale + 5};
        std::vector<vt::Seg> rsegs;
        uint8_t *rcur = ma.base + 65536;
        for (size_t i = 0; i < rlen.size(); ++i) {
            uint8_t *at = i == 2 ? ma2.base + 512 : rcur;
            memset(at, 0, rlen[i]);
            rsegs.push_back({at, rlen[i], i == 2 ? ma2.mh : ma.mh});
            rcur += rlen[i] + 64;
        }
        vt::set_sg(ma.desc(0), rsegs);
        REQUIRE(VipPostRecv(p.a, ma.desc(0), ma.mh) == VIP_SUCCESS);
        vt::set_sg(mb.desc(0), ssegs, VIP_CONTROL_IMMEDIATE, 0xabcdef01);
        REQUIRE(VipPostSend(p.b, mb.desc(0), mb.mh) == VIP_SUCCESS);
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipRecvWait(p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(d->CS.Length == total);
        CHECK(d->CS.ImmediateData == 0xabcdef01u);
        CHECK(d->CS.Status == (VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE));
        // Reassemble both sides and compare.
        std::vector<uint8_t> sent, got;
        for (auto &s : ssegs)
            sent.insert(sent.end(), static_cast<uint8_t *>(s.addr),
                        static_cast<uint8_t *>(s.addr) + s.len);
        for (auto &s : rsegs)
            got.insert(got.end(), static_cast<uint8_t *>(s.addr),
                       static_cast<uint8_t *>(s.addr) + s.len);
        REQUIRE(got.size() == sent.size() + 5);
        CHECK(memcmp(got.data(), sent.data(), sent.size()) == 0);
        CHECK(got[sent.size()] == 0);
        REQUIRE(VipSendWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(d->CS.Status == (VIP_STATUS_DONE | VIP_STATUS_OP_SEND));
        vt::destroy_vi(p.a);
        vt::destroy_vi(p.b);
    }
}

TEST_CASE("Immediate data and zero-length messages", "[xfer]") {
    std::string device = VT_DEVICE();
    Link l(device, VIP_SERVICE_RELIABLE_DELIVERY, 1 << 16);
    struct Msg {
        uint32_t len;
        bool imm;
        uint32_t data;
    };
    std::vector<Msg> msgs = {{0, false, 0},
                             {0, true, 0x11223344},
                             {5, true, 0},
                             {5, false, 0x99},
                             {700, true, 0xffffffff}};
    for (size_t i = 0; i < msgs.size(); ++i) {
        vt::set_desc(l.ma.desc(i), l.ma.base + 8192 + 1024 * i, 1024, l.ma.mh);
        l.ma.desc(i)->CS.ImmediateData = 0x5a5a5a5a;
        REQUIRE(VipPostRecv(l.p.a, l.ma.desc(i), l.ma.mh) == VIP_SUCCESS);
    }
    // A zero-capacity receive takes a zero-length message.
    vt::set_desc(l.ma.desc(msgs.size()), nullptr, 0, l.ma.mh);
    REQUIRE(VipPostRecv(l.p.a, l.ma.desc(msgs.size()), l.ma.mh) == VIP_SUCCESS);
    msgs.push_back({0, true, 42});
    for (size_t i = 0; i < msgs.size(); ++i) {
        uint8_t *buf = l.mb.base + 8192 + 1024 * i;
        memset(buf, static_cast<int>(i + 1), msgs[i].len);
        vt::set_desc(l.mb.desc(i), buf, msgs[i].len, l.mb.mh,
                     msgs[i].imm ? VIP_CONTROL_IMMEDIATE : 0, msgs[i].data);
        REQUIRE(VipPostSend(l.p.b, l.mb.desc(i), l.mb.mh) == VIP_SUCCESS);
    }
    for (size_t i = 0; i < msgs.size(); ++i) {
        INFO("message " << i);
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipRecvWait(l.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(d == l.ma.desc(i));
        CHECK(d->CS.Length == msgs[i].len);
        uint32_t want = VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE;
        if (msgs[i].imm) want |= VIP_STATUS_IMMEDIATE;
        CHECK(d->CS.Status == want);
        if (msgs[i].imm) CHECK(d->CS.ImmediateData == msgs[i].data);
        if (msgs[i].len) CHECK(l.ma.base[8192 + 1024 * i + msgs[i].len - 1] == i + 1);
        REQUIRE(VipSendWait(l.p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(d == l.mb.desc(i));
    }
}

TEST_CASE("Each queue completes in posting order", "[xfer]") {
    std::string device = VT_DEVICE();
    for (VIP_RELIABILITY_LEVEL level :
         {VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION}) {
        INFO(level_name(level));
        Link l(device, level, 8 << 20);
        // Sizes alternate between what a provider may copy and what it may
        // move in other ways, so completions may be ready out of order.
        std::vector<uint32_t> sizes = {200000, 16, 0, 3000, 1, 500000, 64, 70000, 2, 9};
        const uint32_t room = 500000;
        for (size_t i = 0; i < sizes.size(); ++i) {
            vt::set_desc(l.ma.desc(i), l.ma.base + 65536 + room * i, room, l.ma.mh);
            REQUIRE(VipPostRecv(l.p.a, l.ma.desc(i), l.ma.mh) == VIP_SUCCESS);
        }
        for (size_t i = 0; i < sizes.size(); ++i) {
            uint8_t *buf = l.mb.base + 65536 + room * i;
            vt::fill_pattern(buf, sizes[i], 1000 + static_cast<uint32_t>(i));
            vt::set_desc(l.mb.desc(i), buf, sizes[i], l.mb.mh);
            REQUIRE(VipPostSend(l.p.b, l.mb.desc(i), l.mb.mh) == VIP_SUCCESS);
        }
        size_t next_send = 0, next_recv = 0;
        auto end = Clock::now() + std::chrono::seconds(10);
        while ((next_send < sizes.size() || next_recv < sizes.size()) && Clock::now() < end) {
            VIP_DESCRIPTOR *d = nullptr;
            if (next_send < sizes.size() && VipSendDone(l.p.b, &d) == VIP_SUCCESS) {
                CHECK(d == l.mb.desc(next_send));
                ++next_send;
            }
            if (next_recv < sizes.size()) {
                VIP_RETURN rc = VipRecvDone(l.p.a, &d);
                if (rc == VIP_SUCCESS) {
                    CHECK(d == l.ma.desc(next_recv));
                    CHECK(d->CS.Length == sizes[next_recv]);
                    CHECK(vt::check_pattern(l.ma.base + 65536 + room * next_recv, sizes[next_recv],
                                            1000 + next_recv));
                    ++next_recv;
                } else {
                    CHECK(rc == VIP_NOT_DONE);
                }
            }
        }
        CHECK(next_send == sizes.size());
        CHECK(next_recv == sizes.size());
    }
}

TEST_CASE("Done and Wait on empty queues", "[xfer]") {
    std::string device = VT_DEVICE();
    Link l(device, VIP_SERVICE_RELIABLE_DELIVERY, 1 << 16);
    VIP_DESCRIPTOR *d = reinterpret_cast<VIP_DESCRIPTOR *>(0x40);
    CHECK(VipSendDone(l.p.a, &d) == VIP_NOT_DONE);
    CHECK(VipRecvDone(l.p.a, &d) == VIP_NOT_DONE);
    auto start = Clock::now();
    CHECK(VipSendWait(l.p.a, 50, &d) == VIP_TIMEOUT);
    CHECK(VipRecvWait(l.p.a, 50, &d) == VIP_TIMEOUT);
    CHECK(VipRecvWait(l.p.a, 0, &d) == VIP_TIMEOUT);
    CHECK(Clock::now() - start < std::chrono::seconds(5));
    // A receive posted but not completed is not done either.
    vt::set_desc(l.ma.desc(0), l.ma.base + 4096, 64, l.ma.mh);
    REQUIRE(VipPostRecv(l.p.a, l.ma.desc(0), l.ma.mh) == VIP_SUCCESS);
    CHECK(VipRecvDone(l.p.a, &d) == VIP_NOT_DONE);
    CHECK(VipRecvWait(l.p.a, 20, &d) == VIP_TIMEOUT);
    CHECK(d == reinterpret_cast<VIP_DESCRIPTOR *>(0x40));
}

TEST_CASE("A waiting receiver is woken by a message sent later", "[xfer]") {
    std::string device = VT_DEVICE();
    Link l(device, VIP_SERVICE_RELIABLE_DELIVERY, 1 << 20);
    for (uint32_t len : {8u, 100000u}) {
        vt::set_desc(l.ma.desc(0), l.ma.base + 8192, 200000, l.ma.mh);
        REQUIRE(VipPostRecv(l.p.a, l.ma.desc(0), l.ma.mh) == VIP_SUCCESS);
        auto sender = std::async(std::launch::async, [&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            vt::fill_pattern(l.mb.base + 8192, len, len);
            vt::set_desc(l.mb.desc(0), l.mb.base + 8192, len, l.mb.mh);
            VIP_RETURN rc = VipPostSend(l.p.b, l.mb.desc(0), l.mb.mh);
            VIP_DESCRIPTOR *d;
            return rc == VIP_SUCCESS ? VipSendWait(l.p.b, vt::kWaitMs, &d) : rc;
        });
        VIP_DESCRIPTOR *d = nullptr;
        CHECK(VipRecvWait(l.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(sender.get() == VIP_SUCCESS);
        CHECK(d->CS.Length == len);
        CHECK(vt::check_pattern(l.ma.base + 8192, len, len));
    }
}

TEST_CASE("Concurrent waiters on one queue each get distinct descriptors", "[xfer]") {
    std::string device = VT_DEVICE();
    Link l(device, VIP_SERVICE_RELIABLE_DELIVERY, 1 << 20);
    const int n = 200;
    for (int i = 0; i < n; ++i) {
        vt::set_desc(l.ma.desc(i), l.ma.base + 65536 + 64 * i, 64, l.ma.mh);
        REQUIRE(VipPostRecv(l.p.a, l.ma.desc(i), l.ma.mh) == VIP_SUCCESS);
    }
    std::mutex m;
    std::vector<VIP_DESCRIPTOR *> got;
    std::atomic<int> taken{0};
    auto waiter = [&] {
        int failures = 0;
        while (taken.load() < n && failures < 50) {
            VIP_DESCRIPTOR *d = nullptr;
            VIP_RETURN rc = VipRecvWait(l.p.a, 100, &d);
            if (rc == VIP_SUCCESS) {
                std::lock_guard<std::mutex> g(m);
                got.push_back(d);
                ++taken;
            } else {
                ++failures;
            }
        }
    };
    std::thread w1(waiter), w2(waiter), w3(waiter);
    for (int i = 0; i < n; ++i) {
        memcpy(l.mb.base + 65536, &i, sizeof i);
        vt::set_desc(l.mb.desc(0), l.mb.base + 65536, sizeof i, l.mb.mh);
        REQUIRE(VipPostSend(l.p.b, l.mb.desc(0), l.mb.mh) == VIP_SUCCESS);
        VIP_DESCRIPTOR *d;
        REQUIRE(VipSendWait(l.p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
    }
    w1.join();
    w2.join();
    w3.join();
    REQUIRE(got.size() == static_cast<size_t>(n));
    std::set<VIP_DESCRIPTOR *> distinct(got.begin(), got.end());
    CHECK(distinct.size() == static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
        int v = -1;
        memcpy(&v, l.ma.base + 65536 + 64 * i, sizeof v);
        CHECK(v == i);
    }
}

TEST_CASE("Malformed descriptors are refused and not queued", "[xfer][post]") {
    std::string device = VT_DEVICE();
    Link l(device, VIP_SERVICE_RELIABLE_DELIVERY, 1 << 16, 4096);
    VIP_VI_HANDLE s = l.p.b, r = l.p.a;
    uint8_t *sb = l.mb.base + 8192, *rb = l.ma.base + 8192;
    VIP_DESCRIPTOR *sd = l.mb.desc(0), *rd = l.ma.desc(0);
    const uint32_t kAnyOp = ~0u; // no op bits are defined for the reserved operation
    auto refused_send = [&](uint32_t bit, uint32_t op) {
        sd->CS.Status = 0;
        CHECK(VipPostSend(s, sd, l.mb.mh) == VIP_DESCRIPTOR_ERROR);
        CHECK((sd->CS.Status & VIP_STATUS_DONE) != 0);
        CHECK((sd->CS.Status & bit) != 0);
        if (op != kAnyOp) CHECK((sd->CS.Status & VIP_STATUS_OP_MASK) == op);
    };
    auto refused_recv = [&](uint32_t bit) {
        rd->CS.Status = 0;
        CHECK(VipPostRecv(r, rd, l.ma.mh) == VIP_DESCRIPTOR_ERROR);
        CHECK((rd->CS.Status & VIP_STATUS_DONE) != 0);
        CHECK((rd->CS.Status & bit) != 0);
    };
    SECTION("reserved control bits") {
        for (uint16_t bit = 0x10; bit; bit <<= 1) {
            vt::set_desc(sd, sb, 8, l.mb.mh, bit);
            refused_send(VIP_STATUS_FORMAT_ERROR, VIP_STATUS_OP_SEND);
            vt::set_desc(rd, rb, 8, l.ma.mh, bit);
            refused_recv(VIP_STATUS_FORMAT_ERROR);
        }
    }
    SECTION("reserved operation") {
        vt::set_desc(sd, sb, 8, l.mb.mh, VIP_CONTROL_OP_RESERVED);
        refused_send(VIP_STATUS_FORMAT_ERROR, kAnyOp);
        vt::set_desc(rd, rb, 8, l.ma.mh, VIP_CONTROL_OP_RESERVED);
        refused_recv(VIP_STATUS_FORMAT_ERROR);
    }
    SECTION("RDMA operations are not receives") {
        vt::set_desc(rd, rb, 8, l.ma.mh, VIP_CONTROL_OP_RDMAWRITE);
        refused_recv(VIP_STATUS_FORMAT_ERROR);
        vt::set_desc(rd, rb, 8, l.ma.mh, VIP_CONTROL_OP_RDMAREAD);
        refused_recv(VIP_STATUS_FORMAT_ERROR);
    }
    SECTION("RDMA without an address segment") {
        vt::set_desc(sd, nullptr, 0, l.mb.mh, VIP_CONTROL_OP_RDMAWRITE);
        refused_send(VIP_STATUS_FORMAT_ERROR, VIP_STATUS_OP_RDMA_WRITE);
    }
    SECTION("send Length differs from its segments") {
        vt::set_desc(sd, sb, 8, l.mb.mh);
        sd->CS.Length = 9;
        refused_send(VIP_STATUS_FORMAT_ERROR, VIP_STATUS_OP_SEND);
        vt::set_desc(sd, sb, 8, l.mb.mh);
        sd->CS.Length = 0;
        refused_send(VIP_STATUS_FORMAT_ERROR, VIP_STATUS_OP_SEND);
    }
    SECTION("more than the VI's MaxTransferSize") {
        vt::set_desc(sd, sb, 4097, l.mb.mh);
        refused_send(VIP_STATUS_LENGTH_ERROR, VIP_STATUS_OP_SEND);
        vt::set_sg(sd, {{sb, 4000, l.mb.mh}, {sb + 4000, 97, l.mb.mh}});
        refused_send(VIP_STATUS_LENGTH_ERROR, VIP_STATUS_OP_SEND);
        vt::set_desc(rd, rb, 4097, l.ma.mh);
        refused_recv(VIP_STATUS_LENGTH_ERROR);
    }
    SECTION("segment outside its region") {
        vt::set_desc(sd, l.mb.base + l.mb.size - 4, 8, l.mb.mh);
        refused_send(VIP_STATUS_PROTECTION_ERROR, VIP_STATUS_OP_SEND);
    }
    VIP_BOOLEAN sq = VIP_FALSE, rq = VIP_FALSE;
    REQUIRE(VipQueryVi(s, nullptr, nullptr, &sq, nullptr) == VIP_SUCCESS);
    REQUIRE(VipQueryVi(r, nullptr, nullptr, nullptr, &rq) == VIP_SUCCESS);
    CHECK(sq == VIP_TRUE);
    CHECK(rq == VIP_TRUE);
    // The limits themselves are fine, and the connection is still good.
    vt::set_desc(rd, rb, 4096, l.ma.mh);
    REQUIRE(VipPostRecv(r, rd, l.ma.mh) == VIP_SUCCESS);
    vt::fill_pattern(sb, 4096, 77);
    vt::set_desc(sd, sb, 4096, l.mb.mh);
    REQUIRE(VipPostSend(s, sd, l.mb.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d;
    REQUIRE(VipRecvWait(r, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d->CS.Length == 4096);
    CHECK(vt::check_pattern(rb, 4096, 77));
    REQUIRE(VipSendWait(s, vt::kWaitMs, &d) == VIP_SUCCESS);
}

TEST_CASE("Sends need a Connected VI, receives a VI not in Error", "[xfer][post]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 8192), mb(nb, 8192);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(na);
    VIP_VI_HANDLE idle;
    REQUIRE(VipCreateVi(na.nic, &va, nullptr, nullptr, &idle) == VIP_SUCCESS);
    vt::set_desc(ma.desc(0), ma.base + 4096, 8, ma.mh);
    CHECK(VipPostSend(idle, ma.desc(0), ma.mh) == VIP_INVALID_STATE);
    REQUIRE(VipDestroyVi(idle) == VIP_SUCCESS);

    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    REQUIRE(VipDisconnect(p.b) == VIP_SUCCESS);
    REQUIRE(vt::drive_to_state(p.a, VIP_STATE_ERROR, vt::kWaitMs));
    vt::set_desc(ma.desc(0), ma.base + 4096, 8, ma.mh);
    CHECK(VipPostSend(p.a, ma.desc(0), ma.mh) == VIP_INVALID_STATE);
    vt::set_desc(ma.desc(1), ma.base + 4096, 8, ma.mh);
    CHECK(VipPostRecv(p.a, ma.desc(1), ma.mh) == VIP_INVALID_STATE);
    // The Idle side may post receives, not sends.
    vt::set_desc(mb.desc(0), mb.base + 4096, 8, mb.mh);
    CHECK(VipPostSend(p.b, mb.desc(0), mb.mh) == VIP_INVALID_STATE);
    vt::set_desc(mb.desc(1), mb.base + 4096, 8, mb.mh);
    CHECK(VipPostRecv(p.b, mb.desc(1), mb.mh) == VIP_SUCCESS);
    vt::destroy_vi(p.a);
    nb.close();
}

TEST_CASE("Post, Done and Wait refuse bad handles and pointers", "[xfer][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    vt::Memory m(n, 4096);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi, dead;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &dead) == VIP_SUCCESS);
    REQUIRE(VipDestroyVi(dead) == VIP_SUCCESS);
    vt::set_desc(m.desc(0), nullptr, 0, m.mh);
    VIP_DESCRIPTOR *d;
    std::vector<VIP_PVOID> bad = vt::garbage_handles(50);
    bad.push_back(nullptr);
    bad.push_back(dead);
    bad.push_back(n.nic);
    for (VIP_PVOID h : bad) {
        CHECK(VipPostSend(h, m.desc(0), m.mh) == VIP_INVALID_PARAMETER);
        CHECK(VipPostRecv(h, m.desc(0), m.mh) == VIP_INVALID_PARAMETER);
        CHECK(VipSendDone(h, &d) == VIP_INVALID_PARAMETER);
        CHECK(VipRecvDone(h, &d) == VIP_INVALID_PARAMETER);
        CHECK(VipSendWait(h, 10, &d) == VIP_INVALID_PARAMETER);
        CHECK(VipRecvWait(h, 10, &d) == VIP_INVALID_PARAMETER);
    }
    CHECK(VipSendDone(vi, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipRecvDone(vi, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipSendWait(vi, 10, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipRecvWait(vi, 10, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipPostRecv(vi, nullptr, m.mh) == VIP_INVALID_PARAMETER);
    CHECK(VipPostSend(vi, nullptr, m.mh) == VIP_INVALID_PARAMETER);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
}

namespace {

struct NotifyLog {
    std::mutex m;
    std::condition_variable cv;
    struct Call {
        VIP_PVOID ctx;
        VIP_NIC_HANDLE nic;
        VIP_VI_HANDLE vi;
        VIP_DESCRIPTOR *desc;
    };
    std::vector<Call> calls;
    int rearm = 0; // register again from inside the handler this many times
    bool recv = true;

    static void handler(VIP_PVOID ctx, VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, VIP_DESCRIPTOR *d) {
        auto *log = static_cast<NotifyLog *>(ctx);
        std::lock_guard<std::mutex> g(log->m);
        log->calls.push_back({ctx, nic, vi, d});
        if (log->rearm > 0) {
            --log->rearm;
            VIP_RETURN rc = log->recv ? VipRecvNotify(vi, ctx, &NotifyLog::handler)
                                      : VipSendNotify(vi, ctx, &NotifyLog::handler);
            if (rc != VIP_SUCCESS) log->calls.push_back({nullptr, nullptr, nullptr, nullptr});
        }
        log->cv.notify_all();
    }
    bool wait_calls(size_t n, int ms) {
        std::unique_lock<std::mutex> g(m);
        return cv.wait_for(g, std::chrono::milliseconds(ms), [&] { return calls.size() >= n; });
    }
    size_t count() {
        std::lock_guard<std::mutex> g(m);
        return calls.size();
    }
};

} // namespace

TEST_CASE("VipRecvNotify and VipSendNotify hand over completed descriptors", "[xfer][notify]") {
    std::string device = VT_DEVICE();
    NotifyLog rlog, slog;
    Link l(device, VIP_SERVICE_RELIABLE_DELIVERY, 1 << 16);
    for (int i = 0; i < 4; ++i) {
        vt::set_desc(l.ma.desc(i), l.ma.base + 8192 + 256 * i, 256, l.ma.mh);
        REQUIRE(VipPostRecv(l.p.a, l.ma.desc(i), l.ma.mh) == VIP_SUCCESS);
    }
    rlog.rearm = 1; // handles messages 0 and 1, then stops
    slog.recv = false;
    REQUIRE(VipRecvNotify(l.p.a, &rlog, &NotifyLog::handler) == VIP_SUCCESS);
    REQUIRE(VipSendNotify(l.p.b, &slog, &NotifyLog::handler) == VIP_SUCCESS);
    for (int i = 0; i < 4; ++i) {
        memset(l.mb.base + 8192 + 256 * i, 'a' + i, 10);
        vt::set_desc(l.mb.desc(i), l.mb.base + 8192 + 256 * i, 10, l.mb.mh);
        REQUIRE(VipPostSend(l.p.b, l.mb.desc(i), l.mb.mh) == VIP_SUCCESS);
    }
    REQUIRE(rlog.wait_calls(2, vt::kWaitMs));
    REQUIRE(slog.wait_calls(1, vt::kWaitMs));
    {
        std::lock_guard<std::mutex> g(rlog.m);
        REQUIRE(rlog.calls.size() >= 2);
        for (int i = 0; i < 2; ++i) {
            CHECK(rlog.calls[i].ctx == &rlog);
            CHECK(rlog.calls[i].nic == l.na.nic);
            CHECK(rlog.calls[i].vi == l.p.a);
            CHECK(rlog.calls[i].desc == l.ma.desc(i));
            CHECK(rlog.calls[i].desc->CS.Length == 10);
            CHECK((rlog.calls[i].desc->CS.Status & VIP_STATUS_DONE) != 0);
        }
    }
    {
        std::lock_guard<std::mutex> g(slog.m);
        CHECK(slog.calls[0].ctx == &slog);
        CHECK(slog.calls[0].nic == l.nb.nic);
        CHECK(slog.calls[0].vi == l.p.b);
        CHECK(slog.calls[0].desc == l.mb.desc(0));
    }
    // One-shot: the rest is left for Done, in order, and no handler runs again.
    VIP_DESCRIPTOR *d;
    for (int i = 2; i < 4; ++i) {
        REQUIRE(VipRecvWait(l.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(d == l.ma.desc(i));
        CHECK(l.ma.base[8192 + 256 * i] == 'a' + i);
    }
    for (int i = 1; i < 4; ++i) {
        REQUIRE(VipSendWait(l.p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(d == l.mb.desc(i));
    }
    CHECK(rlog.count() == 2);
    CHECK(slog.count() == 1);
}

TEST_CASE("Notify refuses bad handles and a NULL handler", "[xfer][notify][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    NotifyLog log;
    CHECK(VipSendNotify(vi, &log, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipRecvNotify(vi, &log, nullptr) == VIP_INVALID_PARAMETER);
    std::vector<VIP_PVOID> bad = vt::garbage_handles(50);
    bad.push_back(nullptr);
    bad.push_back(n.nic);
    for (VIP_PVOID h : bad) {
        CHECK(VipSendNotify(h, &log, &NotifyLog::handler) == VIP_INVALID_PARAMETER);
        CHECK(VipRecvNotify(h, &log, &NotifyLog::handler) == VIP_INVALID_PARAMETER);
    }
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
    CHECK(VipRecvNotify(vi, &log, &NotifyLog::handler) == VIP_INVALID_PARAMETER);
    CHECK(log.count() == 0);
}

TEST_CASE("Waits are woken by completions while an error callback is registered", "[xfer]") {
    std::string device = VT_DEVICE();
    // Registering an error callback starts the library's notification
    // thread, which watches every connected VI; a Wait must still be woken
    // by the completion it waits for, not by its own timeout.
    vt::ErrorLog la, lb;
    vt::Nic na(device), nb(device);
    la.install(na.nic);
    lb.install(nb.nic);
    vt::Memory ma(na, 1 << 20), mb(nb, 1 << 20);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    const VIP_ULONG timeout = 2000;
    for (int i = 0; i < 20; ++i) {
        INFO("round " << i);
        uint32_t len = i % 2 ? 100000 : 8;
        vt::set_desc(ma.desc(0), ma.base + 8192, 200000, ma.mh);
        REQUIRE(VipPostRecv(p.a, ma.desc(0), ma.mh) == VIP_SUCCESS);
        auto sender = std::async(std::launch::async, [&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            vt::set_desc(mb.desc(0), mb.base + 8192, len, mb.mh);
            VIP_RETURN rc = VipPostSend(p.b, mb.desc(0), mb.mh);
            VIP_DESCRIPTOR *d;
            auto start = Clock::now();
            if (rc == VIP_SUCCESS) rc = VipSendWait(p.b, timeout, &d);
            return std::make_pair(rc, Clock::now() - start);
        });
        VIP_DESCRIPTOR *d = nullptr;
        auto start = Clock::now();
        VIP_RETURN rc = VipRecvWait(p.a, timeout, &d);
        auto took = Clock::now() - start;
        auto [src, stook] = sender.get();
        CHECK(rc == VIP_SUCCESS);
        CHECK(src == VIP_SUCCESS);
        REQUIRE(took < std::chrono::milliseconds(timeout / 2));
        REQUIRE(stook < std::chrono::milliseconds(timeout / 2));
    }
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}
