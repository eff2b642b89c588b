// The smallest end-to-end case: one message each way on every device.
#include "support.h"

#include <cstring>

TEST_CASE("a connected pair exchanges a message each way", "[smoke]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 1 << 16), mb(nb, 1 << 16);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, nullptr, nullptr,
                                  nullptr, [&](VIP_VI_HANDLE a, VIP_VI_HANDLE b) {
                                      vt::set_desc(ma.desc(0), ma.base + 4096, 100, ma.mh);
                                      REQUIRE(VipPostRecv(a, ma.desc(0), ma.mh) == VIP_SUCCESS);
                                      vt::set_desc(mb.desc(0), mb.base + 4096, 100, mb.mh);
                                      REQUIRE(VipPostRecv(b, mb.desc(0), mb.mh) == VIP_SUCCESS);
                                  });
    memcpy(mb.base + 8192, "ping", 5);
    vt::set_desc(mb.desc(1), mb.base + 8192, 5, mb.mh);
    REQUIRE(VipPostSend(p.b, mb.desc(1), mb.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d = nullptr;
    REQUIRE(VipRecvWait(p.a, 5000, &d) == VIP_SUCCESS);
    CHECK(d == ma.desc(0));
    CHECK(d->CS.Length == 5);
    CHECK((d->CS.Status & VIP_STATUS_DONE));
    CHECK((d->CS.Status & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_RECEIVE);
    CHECK(memcmp(ma.base + 4096, "ping", 5) == 0);
    REQUIRE(VipSendWait(p.b, 5000, &d) == VIP_SUCCESS);
    CHECK(d == mb.desc(1));

    memcpy(ma.base + 8192, "pong!", 6);
    vt::set_desc(ma.desc(1), ma.base + 8192, 6, ma.mh, VIP_CONTROL_IMMEDIATE, 0xfeedbeef);
    REQUIRE(VipPostSend(p.a, ma.desc(1), ma.mh) == VIP_SUCCESS);
    REQUIRE(VipRecvWait(p.b, 5000, &d) == VIP_SUCCESS);
    CHECK(d->CS.Length == 6);
    CHECK(d->CS.ImmediateData == 0xfeedbeefu);
    CHECK((d->CS.Status & VIP_STATUS_IMMEDIATE));
    CHECK(memcmp(mb.base + 4096, "pong!", 6) == 0);
    REQUIRE(VipSendWait(p.a, 5000, &d) == VIP_SUCCESS);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}
