// Without cross-memory attach an RDMA read is answered by the target's own
// progress, in pieces through its ring; an answer larger than the ring waits
// for the initiator to make room.  A target asleep in a receive wait must hear
// both the request and the room, wherever in its sleep cycle the request
// lands: here it never spins, so requests arrive while it arms, looks a last
// time and sleeps.
#include "procs.h"

#include <cstring>

namespace {

constexpr int kReads = 3000;
constexpr uint32_t kWindow = 64 << 10; // eight rings of the default size
constexpr size_t kRegion = (64 << 10) + 2 * size_t(kWindow);

uint8_t *buf(vt::Ep &ep) {
    return ep.mem + (64 << 10);
}

// The target: shows its window, then waits in one receive for the word that
// the reads are over, answering them meanwhile.
int target(const std::string &disc) {
    vt::Ep ep;
    vt::Opts o;
    o.rdma_read = true;
    if (!ep.open(kRegion, o)) return 10;
    vt::fill_pattern(buf(ep), kWindow, 7);
    vt::set_desc(ep.desc(0), buf(ep) + kWindow, 64, ep.mh);
    if (!ep.post_recv(ep.desc(0)) || !ep.accept(disc)) return 11;
    uint64_t w[2] = {reinterpret_cast<uint64_t>(buf(ep)), ep.mh};
    memcpy(buf(ep) + kWindow + 64, w, sizeof w);
    vt::set_desc(ep.desc(1), buf(ep) + kWindow + 64, sizeof w, ep.mh);
    if (!ep.post_send(ep.desc(1)) || !ep.wait_send(ep.desc(1))) return 12;
    if (!ep.wait_recv(ep.desc(0), 60000)) {
        fprintf(stderr, "target: %s\n", ep.err.c_str());
        return 13;
    }
    return 0;
}

} // namespace

TEST_CASE("shm child: RDMA reads answered by a target asleep in a receive wait", "[.]") {
    if (!getenv("VT_FRESH")) return; // started by the case below only
    REQUIRE(vt::config_value("SHM_CMA") == "0");
    REQUIRE(vt::config_value("SPIN_US") == "0");
    std::string disc = vt::unique_disc("ra");
    vt::Child child(vt::spawn_child([&] { return target(disc); }));

    vt::Ep ep;
    vt::Opts o;
    o.rdma_read = true;
    EP_REQUIRE(ep, ep.open(kRegion, o));
    vt::set_desc(ep.desc(0), buf(ep) + kWindow, 64, ep.mh);
    EP_REQUIRE(ep, ep.post_recv(ep.desc(0)));
    EP_REQUIRE(ep, ep.connect(disc));
    EP_REQUIRE(ep, ep.wait_recv(ep.desc(0)));
    uint64_t w[2];
    memcpy(w, buf(ep) + kWindow, sizeof w);

    // Sizes from one line to the whole window, so answers end at every point of the ring.
    uint32_t len = 1;
    for (int i = 0; i < kReads; ++i) {
        len = (len * 7919 + 4099) % kWindow + 1;
        vt::set_rdma(ep.desc(1), VIP_CONTROL_OP_RDMAREAD, buf(ep), len, ep.mh, w[0],
                     static_cast<VIP_MEM_HANDLE>(w[1]));
        INFO("read " << i << " of " << len << " bytes");
        EP_REQUIRE(ep, ep.post_send(ep.desc(1)));
        EP_REQUIRE(ep, ep.wait_send(ep.desc(1), 10000));
        REQUIRE(ep.desc(1)->CS.Length == len);
        if (i % 100 == 0) REQUIRE(vt::check_pattern(buf(ep), len, 7));
    }
    vt::set_desc(ep.desc(2), buf(ep) + kWindow, 8, ep.mh);
    EP_REQUIRE(ep, ep.post_send(ep.desc(2)));
    EP_REQUIRE(ep, ep.wait_send(ep.desc(2)));
    int status = child.wait(60);
    INFO("target " << vt::status_text(status));
    REQUIRE(status == 0);
}

TEST_CASE("RDMA reads through the ring complete whenever the request reaches a sleeping target",
          "[shm][rdma]") {
    int status =
        vt::run_fresh("shm child: RDMA reads answered by a target asleep in a receive wait",
                      {"VT_FRESH=1", "VIPL_SHM_CMA=0", "VIPL_SPIN_US=0"}, 150);
    INFO("fresh process " << vt::status_text(status));
    REQUIRE(status == 0);
}
