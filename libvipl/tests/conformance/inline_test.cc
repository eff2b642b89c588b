// Inline sends (vipl_ext.h): VipQueryViInline and VipPostSendInline.  On a provider
// that takes them (shm) the bytes come from unregistered memory, arrive as one ordinary
// message, never overtake a posted send and complete nothing; on one that does not
// (tcp) the maximum is 0 and every inline send is refused.
#include "support.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

namespace {

struct Link {
    vt::Nic na, nb;
    vt::Memory ma, mb;
    vt::Pair p;
    explicit Link(const std::string &device, size_t bytes = 4 << 20)
        : na(device), nb(device), ma(na, bytes), mb(nb, bytes) {
        p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    }
    ~Link() {
        vt::destroy_vi(p.a);
        vt::destroy_vi(p.b);
    }
    uint32_t max() {
        VIP_UINT32 m = 12345;
        REQUIRE(VipQueryViInline(p.b, &m) == VIP_SUCCESS);
        return m;
    }
};

VIP_VI_COUNTERS counters(VIP_VI_HANDLE vi) {
    VIP_VI_COUNTERS c{};
    REQUIRE(VipQueryViCounters(vi, &c) == VIP_SUCCESS);
    return c;
}

// Message k of the ordering test: its sequence number, then bytes derived from it.
void fill_msg(uint8_t *p, uint32_t len, uint32_t k) {
    memcpy(p, &k, sizeof k);
    for (uint32_t i = sizeof k; i < len; ++i) p[i] = static_cast<uint8_t>(k * 7 + i);
}
bool msg_ok(const uint8_t *p, uint32_t len, uint32_t k) {
    uint32_t got;
    memcpy(&got, p, sizeof got);
    if (len < sizeof got || got != k) return false;
    for (uint32_t i = sizeof got; i < len; ++i)
        if (p[i] != static_cast<uint8_t>(k * 7 + i)) return false;
    return true;
}

} // namespace

TEST_CASE("VipPostSendInline sends unregistered memory as one message, in order, completing "
          "nothing",
          "[ext][inline]") {
    std::string device = VT_DEVICE();
    Link l(device);
    uint32_t max = l.max();
    if (device.rfind("tcp", 0) == 0) {
        // A socket write from registered memory is what a tcp send is already.
        CHECK(max == 0);
        char byte = 'x';
        VIP_INLINE_SEGMENT s{&byte, 1};
        CHECK(VipPostSendInline(l.p.b, &s, 1) == VIP_INVALID_PARAMETER);
        CHECK(counters(l.p.b).InlineSends == 0);
        return;
    }
    REQUIRE(max >= 4096);
    for (int i = 0; i < 3; ++i) {
        vt::set_desc(l.ma.desc(i), l.ma.base + (1 << 20) + i * 65536, 65536, l.ma.mh);
        REQUIRE(VipPostRecv(l.p.a, l.ma.desc(i), l.ma.mh) == VIP_SUCCESS);
    }
    // A posted send, an inline one gathered from three pieces of the stack, a posted one.
    memcpy(l.mb.base + 8192, "first", 5);
    vt::set_desc(l.mb.desc(0), l.mb.base + 8192, 5, l.mb.mh);
    REQUIRE(VipPostSend(l.p.b, l.mb.desc(0), l.mb.mh) == VIP_SUCCESS);
    char head[] = "in", mid[] = "", tail[3000];
    for (size_t i = 0; i < sizeof tail; ++i) tail[i] = static_cast<char>('a' + i % 26);
    VIP_INLINE_SEGMENT segs[3] = {{head, 2}, {mid, 0}, {tail, sizeof tail}};
    REQUIRE(VipPostSendInline(l.p.b, segs, 3) == VIP_SUCCESS);
    // The caller's memory is its own again at once.
    memset(head, '#', 2);
    memset(tail, '#', sizeof tail);
    memcpy(l.mb.base + 16384, "third", 5);
    vt::set_desc(l.mb.desc(1), l.mb.base + 16384, 5, l.mb.mh);
    REQUIRE(VipPostSend(l.p.b, l.mb.desc(1), l.mb.mh) == VIP_SUCCESS);

    std::vector<vt::Taken> got;
    auto recvs = [&] {
        size_t n = 0;
        for (const vt::Taken &t : got) n += t.recv;
        return n;
    };
    REQUIRE(vt::drive_until(
        l.p.a, [&] { return recvs() == 3; }, vt::kWaitMs, &got));
    std::vector<VIP_DESCRIPTOR *> in;
    for (const vt::Taken &t : got) {
        CHECK(t.rc == VIP_SUCCESS);
        if (t.recv) in.push_back(t.desc);
    }
    REQUIRE(in.size() == 3);
    CHECK(in[0] == l.ma.desc(0));
    CHECK(in[0]->CS.Length == 5);
    CHECK(memcmp(l.ma.base + (1 << 20), "first", 5) == 0);
    CHECK(in[1] == l.ma.desc(1));
    CHECK(in[1]->CS.Status == (VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE));
    REQUIRE(in[1]->CS.Length == 2 + sizeof tail);
    const uint8_t *m = l.ma.base + (1 << 20) + 65536;
    CHECK(memcmp(m, "in", 2) == 0);
    bool same = true;
    for (size_t i = 0; i < sizeof tail; ++i) same &= m[2 + i] == 'a' + i % 26;
    CHECK(same);
    CHECK(in[2]->CS.Length == 5);
    CHECK(memcmp(l.ma.base + (1 << 20) + 2 * 65536, "third", 5) == 0);

    // Only the two posted sends complete; the counters count all three.
    std::vector<vt::Taken> sent;
    REQUIRE(vt::drive_until(
        l.p.b, [&] { return sent.size() >= 2; }, vt::kWaitMs, &sent));
    VIP_DESCRIPTOR *d = nullptr;
    CHECK(VipSendDone(l.p.b, &d) == VIP_NOT_DONE);
    REQUIRE(sent.size() == 2);
    CHECK(sent[0].desc == l.mb.desc(0));
    CHECK(sent[1].desc == l.mb.desc(1));
    VIP_VI_COUNTERS c = counters(l.p.b);
    CHECK(c.InlineSends == 1);
    CHECK(c.SendsPosted == 3);
    CHECK(c.BytesSent == 5 + 2 + sizeof tail + 5);
}

TEST_CASE("VipPostSendInline refuses when the transport is full and never overtakes a posted "
          "send",
          "[ext][inline]") {
    std::string device = VT_DEVICE();
    if (device.rfind("tcp", 0) == 0) return; // no inline sends there (the test above)
    Link l(device, 8 << 20);
    // Enough messages of at least 2 KiB a round to fill the ring in effect twice over.
    const uint32_t kMaxLen = 8192;
    const uint32_t kPerRound = static_cast<uint32_t>(std::clamp<unsigned long>(
        2 * std::stoul(vt::config_value("SHM_RING_SIZE")) / 2048, 60, 800));
    REQUIRE(size_t(1 << 20) + size_t(kPerRound) * kMaxLen <= size_t(8 << 20)); // the buffers fit
    REQUIRE(kPerRound * sizeof(VIP_DESCRIPTOR) <= size_t(1 << 20));            // before them
    REQUIRE(l.max() >= kMaxLen);
    std::mt19937 rng(7);
    uint32_t seq = 0, expect = 0, refused = 0, posted = 0, inlined = 0;
    uint8_t *rbase = l.ma.base + (1 << 20), *sbase = l.mb.base + (1 << 20);
    std::vector<uint8_t> scratch(kMaxLen);
    for (int round = 0; round < 6; ++round) {
        INFO("round " << round);
        for (uint32_t i = 0; i < kPerRound; ++i) {
            vt::set_desc(l.ma.desc(i), rbase + i * kMaxLen, kMaxLen, l.ma.mh);
            REQUIRE(VipPostRecv(l.p.a, l.ma.desc(i), l.ma.mh) == VIP_SUCCESS);
        }
        // The receiver takes nothing meanwhile: the ring fills, inline sends are refused
        // and go as posted sends (as a stream does); later inline sends must queue behind.
        bool refused_this_round = false;
        for (uint32_t i = 0; i < kPerRound; ++i, ++seq) {
            uint32_t len = 2048 + rng() % (kMaxLen - 2048 + 1);
            bool try_inline = rng() % 4 != 0;
            VIP_RETURN rc = VIP_ERROR_RESOURCE;
            if (try_inline) {
                fill_msg(scratch.data(), len, seq);
                VIP_INLINE_SEGMENT s{scratch.data(), len};
                rc = VipPostSendInline(l.p.b, &s, 1);
                REQUIRE((rc == VIP_SUCCESS || rc == VIP_ERROR_RESOURCE));
                if (rc == VIP_ERROR_RESOURCE) {
                    ++refused;
                    refused_this_round = true;
                } else {
                    ++inlined;
                }
            }
            if (rc != VIP_SUCCESS) {
                fill_msg(sbase + i * kMaxLen, len, seq);
                vt::set_desc(l.mb.desc(i), sbase + i * kMaxLen, len, l.mb.mh);
                REQUIRE(VipPostSend(l.p.b, l.mb.desc(i), l.mb.mh) == VIP_SUCCESS);
                ++posted;
            }
        }
        CHECK(refused_this_round);
        // Everything arrives, each message once, in the order the calls took them.
        std::vector<vt::Taken> got;
        uint32_t in = 0;
        bool ordered = true;
        auto take = [&] {
            for (; in < got.size(); ++in) {
                if (!got[in].recv) continue;
                const VIP_DESCRIPTOR *d = got[in].desc;
                auto slot = static_cast<uint32_t>(d - l.ma.desc(0));
                ordered &= got[in].rc == VIP_SUCCESS && slot < kPerRound &&
                           msg_ok(rbase + slot * kMaxLen, d->CS.Length, expect);
                ++expect;
            }
            return expect == seq;
        };
        // The sender's calls push what waited for room; the receiver's free it.
        for (int k = 0; k < 200 && !take(); ++k) {
            vt::drive_until(
                l.p.a, [&] { return take(); }, 10, &got);
            vt::drive_until(
                l.p.b, [] { return false; }, 1);
        }
        REQUIRE(expect == seq);
        CHECK(ordered);
        std::vector<vt::Taken> done;
        vt::drive_until(
            l.p.b, [&] { return false; }, 50, &done);
    }
    CHECK(refused > 0);
    CHECK(inlined > 0);
    VIP_VI_COUNTERS c = counters(l.p.b);
    CHECK(c.InlineSends == inlined);
    CHECK(c.SendsPosted == inlined + posted);
    CHECK(vt::vi_state(l.p.a) == VIP_STATE_CONNECTED);
    CHECK(vt::vi_state(l.p.b) == VIP_STATE_CONNECTED);
}

TEST_CASE("VipPostSendInline and VipQueryViInline refuse bad arguments and states",
          "[ext][inline]") {
    std::string device = VT_DEVICE();
    char byte = 'x';
    VIP_INLINE_SEGMENT one{&byte, 1};
    VIP_UINT32 m = 7;
    {
        vt::Nic n(device);
        VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
        VIP_VI_HANDLE vi;
        REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
        // No connection: nothing to send on, nothing inline.
        CHECK(VipQueryViInline(vi, &m) == VIP_SUCCESS);
        CHECK(m == 0);
        CHECK(VipPostSendInline(vi, &one, 1) == VIP_INVALID_STATE);
        CHECK(VipQueryViInline(vi, nullptr) == VIP_INVALID_PARAMETER);
        CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
        CHECK(VipPostSendInline(vi, &one, 1) == VIP_INVALID_PARAMETER);
        CHECK(VipQueryViInline(vi, &m) == VIP_INVALID_PARAMETER);
    }
    CHECK(VipPostSendInline(nullptr, &one, 1) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryViInline(nullptr, &m) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50)) {
        CHECK(VipPostSendInline(h, &one, 1) == VIP_INVALID_PARAMETER);
        CHECK(VipQueryViInline(h, &m) == VIP_INVALID_PARAMETER);
    }
    if (device.rfind("tcp", 0) == 0) return;
    Link l(device);
    uint32_t max = l.max();
    REQUIRE(max > 0);
    std::vector<uint8_t> big(max + 1, 0x5a);
    VIP_INLINE_SEGMENT five[5] = {one, one, one, one, one};
    CHECK(VipPostSendInline(l.p.b, nullptr, 1) == VIP_INVALID_PARAMETER);
    CHECK(VipPostSendInline(l.p.b, &one, 0) == VIP_INVALID_PARAMETER);
    CHECK(VipPostSendInline(l.p.b, five, 5) == VIP_INVALID_PARAMETER);
    VIP_INLINE_SEGMENT null_data{nullptr, 3};
    CHECK(VipPostSendInline(l.p.b, &null_data, 1) == VIP_INVALID_PARAMETER);
    VIP_INLINE_SEGMENT too_long{big.data(), max + 1};
    CHECK(VipPostSendInline(l.p.b, &too_long, 1) == VIP_INVALID_PARAMETER);
    // Lengths that add up past the maximum (each one below it) are refused as well.
    VIP_INLINE_SEGMENT halves[2] = {{big.data(), max / 2 + 1}, {big.data(), max / 2 + 1}};
    CHECK(VipPostSendInline(l.p.b, halves, 2) == VIP_INVALID_PARAMETER);
    CHECK(counters(l.p.b).InlineSends == 0);
    // Nothing went out: the peer has no message (its receive would complete).
    vt::set_desc(l.ma.desc(0), l.ma.base + 8192, 64, l.ma.mh);
    REQUIRE(VipPostRecv(l.p.a, l.ma.desc(0), l.ma.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d = nullptr;
    CHECK(VipRecvWait(l.p.a, 50, &d) == VIP_TIMEOUT);
    // The largest one goes.
    VIP_INLINE_SEGMENT exact{big.data(), max};
    vt::set_desc(l.ma.desc(1), l.ma.base + (1 << 20), max, l.ma.mh);
    REQUIRE(VipPostRecv(l.p.a, l.ma.desc(1), l.ma.mh) == VIP_SUCCESS);
    // The first receive is too small for it: drop it first (a disconnect would flush).
    REQUIRE(VipPostSendInline(l.p.b, &one, 1) == VIP_SUCCESS);
    REQUIRE(VipRecvWait(l.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d == l.ma.desc(0));
    CHECK(d->CS.Length == 1);
    REQUIRE(VipPostSendInline(l.p.b, &exact, 1) == VIP_SUCCESS);
    REQUIRE(VipRecvWait(l.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(d == l.ma.desc(1));
    CHECK(d->CS.Length == max);
    // Disconnected: refused.
    REQUIRE(VipDisconnect(l.p.b) == VIP_SUCCESS);
    CHECK(VipPostSendInline(l.p.b, &one, 1) == VIP_INVALID_STATE);
    CHECK(VipQueryViInline(l.p.b, &m) == VIP_SUCCESS);
    CHECK(m == 0);
}
