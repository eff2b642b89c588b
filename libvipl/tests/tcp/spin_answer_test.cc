// The tcp provider's guess for the spin policy: a peer cannot be seen asleep across a
// wire, so one that owes an answer to a message of ours counts as at work (four times
// the budget), one that owes nothing does not.  Checked in a fresh process with
// VIPL_SPIN_CONTENDED=0: the host's other work must not decide the budgets.
#include "support.h"

namespace {

VIP_UINT64 budget(VIP_VI_HANDLE vi, VIP_UINT64 base) {
    VIP_SPIN_BUDGET b{};
    REQUIRE(VipViSpinBudget(vi, base, &b) == VIP_SUCCESS);
    return b.Nanoseconds;
}

} // namespace

TEST_CASE("tcp spin policy: a peer owing an answer (fresh process)", "[.][tcp-spin-answer]") {
    vt::Nic na("tcp:127.0.0.1"), nb("tcp:127.0.0.1");
    vt::Memory ma(na, 8192), mb(nb, 8192);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, nullptr,
                                  nullptr, nullptr, [&](VIP_VI_HANDLE a, VIP_VI_HANDLE b) {
                                      vt::set_desc(ma.desc(0), ma.base + 4096, 64, ma.mh);
                                      REQUIRE(VipPostRecv(a, ma.desc(0), ma.mh) == VIP_SUCCESS);
                                      vt::set_desc(mb.desc(0), mb.base + 4096, 64, mb.mh);
                                      REQUIRE(VipPostRecv(b, mb.desc(0), mb.mh) == VIP_SUCCESS);
                                  });
    const VIP_UINT64 base = 64000;
    CHECK(budget(p.a, base) == base); // nothing sent yet: nobody owes anything
    CHECK(budget(p.b, base) == base);

    // b's request goes out: b's peer owes it an answer.
    vt::set_desc(mb.desc(1), mb.base + 5000, 8, mb.mh);
    REQUIRE(VipPostSend(p.b, mb.desc(1), mb.mh) == VIP_SUCCESS);
    CHECK(budget(p.b, base) == 4 * base);
    VIP_DESCRIPTOR *d = nullptr;
    REQUIRE(VipRecvWait(p.a, 5000, &d) == VIP_SUCCESS);
    CHECK(budget(p.a, base) == base); // a owes; its peer does not

    // The answer: now a waits for b's next request, b owes nothing.
    vt::set_desc(ma.desc(1), ma.base + 5000, 8, ma.mh);
    REQUIRE(VipPostSend(p.a, ma.desc(1), ma.mh) == VIP_SUCCESS);
    REQUIRE(VipRecvWait(p.b, 5000, &d) == VIP_SUCCESS);
    CHECK(budget(p.b, base) == base);
    CHECK(budget(p.a, base) == 4 * base);

    // A guess that keeps missing (a client idle between requests) stops counting after
    // eight misses: the budget then halves per miss as for any peer.
    for (int i = 0; i < 8; ++i) REQUIRE(VipViSpinOutcome(p.a, VIP_FALSE) == VIP_SUCCESS);
    CHECK(budget(p.a, base) == base >> 8);
    REQUIRE(VipViSpinOutcome(p.a, VIP_TRUE) == VIP_SUCCESS);
    CHECK(budget(p.a, base) == 4 * base);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("tcp: a peer that owes an answer to a message of ours is spun for longer, one "
          "that owes none is not",
          "[tcp][spin]") {
    int status = vt::run_fresh("tcp spin policy: a peer owing an answer (fresh process)",
                               {"VIPL_SPIN_CONTENDED=0"});
    INFO(vt::status_text(status));
    CHECK(status == 0);
}
