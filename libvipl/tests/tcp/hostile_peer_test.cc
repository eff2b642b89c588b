// A hostile peer against a real tcp VI: the test plays the peer on a raw
// socket (raw_peer.h) and sends what no VIPL peer would: lengths past
// MaxTransferSize, unknown frame types, a header cut short, forged region
// handles, RDMA outside the registered regions, acknowledgements of nothing.
// Each time the connection is closed, the VI goes to the Error state and the
// error callback hears of it, the target memory is untouched, every wait is
// bounded, and the same VI connects again on the same NIC and receives.
#include "raw_peer.h"
#include "support.h"

#include <cstring>
#include <sys/mman.h>

namespace {

using namespace vipl::tcp;

constexpr size_t kPage = 4096;
constexpr uint64_t kMtu = 4096;

// Four pages, each its own region: descriptors and receive buffers (no
// RDMA), a canary below the window (no RDMA), the window (RDMA write and
// read), a canary above it (no RDMA).
enum Page { kPlain, kBelow, kWindow, kAbove, kPages };
constexpr size_t kRecvBuffer = 1024; // offsets in the plain page: 2 x 512 bytes
constexpr size_t kFreshBuffer = 3072;

struct Target {
    vt::ErrorLog log; // outlives the NIC's notifications
    vt::Nic nic{"tcp:127.0.0.1"};
    uint8_t *mem = nullptr;
    VIP_MEM_HANDLE mh[kPages] = {};
    uint16_t port = 0;
    VIP_VI_HANDLE vi = nullptr;
    std::vector<uint8_t> before;

    Target() {
        log.install(nic.nic);
        void *p = mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        REQUIRE(p != MAP_FAILED);
        mem = static_cast<uint8_t *>(p);
        vt::fill_pattern(mem, kPages * kPage, 7);
        for (int i = 0; i < kPages; ++i) {
            VIP_MEM_ATTRIBUTES ma{};
            ma.Ptag = nic.ptag;
            ma.EnableRdmaWrite = ma.EnableRdmaRead = i == kWindow ? VIP_TRUE : VIP_FALSE;
            REQUIRE(VipRegisterMem(nic.nic, page(i), kPage, &ma, &mh[i]) == VIP_SUCCESS);
        }
        port = vt::raw_listen(nic.nic);
        REQUIRE(port != 0);
        VIP_VI_ATTRIBUTES a = vt::vi_attrs(nic, VIP_SERVICE_RELIABLE_DELIVERY, kMtu, true, true);
        REQUIRE(VipCreateVi(nic.nic, &a, nullptr, nullptr, &vi) == VIP_SUCCESS);
        for (int i = 0; i < 2; ++i) {
            vt::set_desc(desc(i), page(kPlain) + kRecvBuffer + 512 * i, 512, mh[kPlain]);
            REQUIRE(VipPostRecv(vi, desc(i), mh[kPlain]) == VIP_SUCCESS);
        }
    }
    ~Target() {
        vt::destroy_vi(vi);
        nic.close();
        munmap(mem, kPages * kPage);
    }
    uint8_t *page(int i) { return mem + i * kPage; }
    uint64_t addr(int i, uint64_t off = 0) { return reinterpret_cast<uint64_t>(page(i)) + off; }
    VIP_DESCRIPTOR *desc(int i) { return reinterpret_cast<VIP_DESCRIPTOR *>(mem) + i; }

    // Connects a raw peer and remembers the memory a hostile peer must not change.
    void connect(vt::RawPeer &peer) {
        REQUIRE(peer.connect(nic.nic, vi, port, vt::kWaitMs) == "");
        before.assign(mem, mem + kPages * kPage);
    }

    // Everything but the descriptors is as it was: receive buffers,
    // canaries, the window.
    void check_untouched() {
        size_t from = kRecvBuffer;
        size_t diff = 0;
        for (size_t i = from; i < kPages * kPage && !diff; ++i)
            if (mem[i] != before[i]) diff = i;
        INFO("first changed byte: page " << diff / kPage << " offset " << diff % kPage);
        CHECK(diff == 0);
    }

    // The VI fails with `code` (reported to the error callback) and closes
    // the connection; returns the frames it sent before.
    std::vector<vt::Received> expect_failure(vt::RawPeer &peer, VIP_ERROR_CODE code,
                                             std::vector<vt::Taken> *taken = nullptr) {
        REQUIRE(vt::drive_to_state(vi, VIP_STATE_ERROR, vt::kWaitMs, taken));
        VIP_ERROR_DESCRIPTOR err{};
        REQUIRE(log.wait_any(vi, vt::kWaitMs, &err));
        CHECK(err.ErrorCode == code);
        std::vector<uint8_t> bytes;
        CHECK(peer.wait_closed(vt::kWaitMs, &bytes));
        std::vector<vt::Received> frames;
        CHECK(vt::split_frames(bytes, kMtu, &frames));
        check_untouched();
        return frames;
    }

    // After VipDisconnect the same VI takes a new connection on the same NIC
    // and receives a message.
    void check_works_again() {
        REQUIRE(VipDisconnect(vi) == VIP_SUCCESS);
        vt::drive_until(
            vi, [] { return false; }, 20);
        REQUIRE(vt::vi_state(vi) == VIP_STATE_IDLE);
        VIP_DESCRIPTOR *d = desc(4);
        uint8_t *buf = page(kPlain) + kFreshBuffer;
        vt::set_desc(d, buf, 256, mh[kPlain]);
        REQUIRE(VipPostRecv(vi, d, mh[kPlain]) == VIP_SUCCESS);
        vt::RawPeer peer;
        REQUIRE(peer.connect(nic.nic, vi, port, vt::kWaitMs) == "");
        uint8_t msg[100];
        vt::fill_pattern(msg, sizeof msg, 11);
        REQUIRE(peer.send_all(vt::frame(Frame{kSend, 0, sizeof msg, 0, 0, 0}, msg).data(),
                              kFrameHeader + sizeof msg, vt::kWaitMs));
        VIP_DESCRIPTOR *got = nullptr;
        VIP_RETURN rc = VIP_NOT_DONE;
        REQUIRE(vt::drive_until(
            vi, [&] { return (rc = VipRecvDone(vi, &got)) != VIP_NOT_DONE; }, vt::kWaitMs));
        CHECK(rc == VIP_SUCCESS);
        CHECK(got == d);
        CHECK(d->CS.Length == sizeof msg);
        CHECK(memcmp(buf, msg, sizeof msg) == 0);
        CHECK(vt::vi_state(vi) == VIP_STATE_CONNECTED);
    }
};

bool sent(const std::vector<vt::Received> &frames, uint8_t type, uint32_t handle = ~0u) {
    for (const vt::Received &r : frames)
        if (r.f.type == type && (handle == ~0u || r.f.handle == handle)) return true;
    return false;
}

void send(vt::RawPeer &peer, const std::vector<uint8_t> &bytes) {
    REQUIRE(peer.send_all(bytes.data(), bytes.size(), vt::kWaitMs));
}

} // namespace

TEST_CASE("hostile peer: a frame longer than MaxTransferSize closes the connection") {
    Target t;
    vt::RawPeer peer;
    t.connect(peer);
    // Only the header: the VI must refuse it before taking any payload.
    send(peer, vt::header(Frame{kSend, 0, static_cast<uint32_t>(kMtu) + 1, 0, 0, 0}));
    t.expect_failure(peer, VIP_ERROR_CONN_LOST);
    t.check_works_again();
}

TEST_CASE("hostile peer: an unknown frame type closes the connection") {
    Target t;
    vt::RawPeer peer;
    t.connect(peer);
    std::vector<uint8_t> h = vt::header(Frame{kSend, 0, 8, 0, 0, 0});
    h[0] = 0x2a;
    h.resize(kFrameHeader + 8, 0xee);
    send(peer, h);
    t.expect_failure(peer, VIP_ERROR_CONN_LOST);
    t.check_works_again();
}

TEST_CASE("hostile peer: a header cut short, then the end of the stream, fails the VI") {
    Target t;
    vt::RawPeer peer;
    t.connect(peer);
    std::vector<uint8_t> h = vt::header(Frame{kSend, 0, 16, 0, 0, 0});
    h.resize(10);
    send(peer, h);
    peer.finish();
    t.expect_failure(peer, VIP_ERROR_CONN_LOST);
    t.check_works_again();
}

TEST_CASE("hostile peer: an RDMA write with a forged region handle is refused and ends the "
          "connection") {
    Target t;
    vt::RawPeer peer;
    t.connect(peer);
    uint32_t forged[] = {t.mh[kWindow] + (1u << 20), t.mh[kWindow] + 100, t.mh[kAbove],
                         0xffffffffu};
    uint32_t handle = GENERATE_COPY(from_range(std::begin(forged), std::end(forged)));
    INFO("handle " << std::hex << handle);
    send(peer, vt::frame(Frame{kRdmaWrite, 0, 64, 0, handle, t.addr(kWindow)}, nullptr, 0xee));
    auto frames = t.expect_failure(peer, VIP_ERROR_RDMAW_PROT);
    CHECK(sent(frames, kError)); // the peer learns why
    t.check_works_again();
}

TEST_CASE("hostile peer: an RDMA write past the end of its region is refused and ends the "
          "connection") {
    Target t;
    vt::RawPeer peer;
    t.connect(peer);
    send(peer, vt::frame(Frame{kRdmaWrite, 0, 16, 0, t.mh[kWindow], t.addr(kWindow, kPage - 8)},
                         nullptr, 0xee));
    auto frames = t.expect_failure(peer, VIP_ERROR_RDMAW_PROT);
    CHECK(sent(frames, kError));
    CHECK(t.page(kAbove)[0] == t.before[kAbove * kPage]);
    t.check_works_again();
}

TEST_CASE("hostile peer: an RDMA read outside a region is refused without data and ends the "
          "connection") {
    Target t;
    vt::RawPeer peer;
    t.connect(peer);
    // Starts in the canary below the window, ends inside it.
    send(peer, vt::header(Frame{kRdmaReadReq, 0, 0, 64, t.mh[kWindow], t.addr(kWindow) - 32}));
    auto frames = t.expect_failure(peer, VIP_ERROR_RDMAR_PROT);
    CHECK(sent(frames, kRdmaReadResp, kReadRefused));
    for (const vt::Received &r : frames) CHECK((r.f.type != kRdmaReadResp || r.payload.empty()));
    t.check_works_again();
}

TEST_CASE("hostile peer: an acknowledgement beyond what was sent closes the connection") {
    Target t;
    vt::RawPeer peer;
    t.connect(peer);
    // One RDMA write from the VI: it waits for acknowledgement 1.
    VIP_DESCRIPTOR *d = t.desc(3);
    vt::set_rdma(d, VIP_CONTROL_OP_RDMAWRITE, t.page(kPlain) + kFreshBuffer, 32, t.mh[kPlain],
                 0x1000, 0x77);
    REQUIRE(VipPostSend(t.vi, d, t.mh[kPlain]) == VIP_SUCCESS);
    std::vector<uint8_t> out;
    REQUIRE(vt::drive_until(
        t.vi, [&] { return peer.drain(&out) && out.size() >= kFrameHeader + 32; }, vt::kWaitMs));
    send(peer, vt::header(Frame{kAck, 0, 0, 0, 0, 2}));
    std::vector<vt::Taken> taken;
    t.expect_failure(peer, VIP_ERROR_CONN_LOST, &taken);
    vt::drive_until(
        t.vi, [] { return false; }, 20, &taken);
    bool failed = false;
    for (const vt::Taken &k : taken)
        if (k.desc == d) failed = k.rc == VIP_DESCRIPTOR_ERROR;
    CHECK(failed); // never completed as if acknowledged
    t.check_works_again();
}
