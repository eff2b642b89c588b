// Where in its ring a connection's traffic goes.  Request-reply traffic, which never
// fills the ring, keeps going round the ring's first 32 KiB: the pages further on are
// never touched (the connection memory a database's backends hold stays small, and
// both ends keep the lines they use in cache).  A burst that fills the ring still has
// all of it, even one that starts with a rewind, and every message arrives intact and
// in order across the rewinds.
#include "support.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kRewind = 32 * 1024; // libvipl/src/prov/shm/shm_send.cc: kRewindBytes

// Resident shared memory of this process (both ends' mappings of the connection).
long rss_shmem_kib() {
    FILE *f = fopen("/proc/self/status", "r");
    REQUIRE(f);
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "RssShmem: %ld kB", &kib) == 1) break;
    fclose(f);
    REQUIRE(kib >= 0);
    return kib;
}

VIP_VI_COUNTERS counters(VIP_VI_HANDLE vi) {
    VIP_VI_COUNTERS c{};
    REQUIRE(VipQueryViCounters(vi, &c) == VIP_SUCCESS);
    return c;
}

struct Link {
    vt::Nic na{"shm0"}, nb{"shm0"};
    vt::Memory ma{na, 4 << 20}, mb{nb, 4 << 20};
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    ~Link() {
        vt::destroy_vi(p.a);
        vt::destroy_vi(p.b);
    }
};

// One message from `from` to `to`: its first 8 bytes are `seq`, checked on arrival.
void one_way(VIP_VI_HANDLE from, vt::Memory &fm, VIP_VI_HANDLE to, vt::Memory &tm, uint64_t seq) {
    uint8_t *sbuf = fm.base + (1 << 20), *rbuf = tm.base + (1 << 20);
    vt::set_desc(tm.desc(0), rbuf, 64, tm.mh);
    REQUIRE(VipPostRecv(to, tm.desc(0), tm.mh) == VIP_SUCCESS);
    memcpy(sbuf, &seq, sizeof seq);
    vt::set_desc(fm.desc(1), sbuf, sizeof seq, fm.mh);
    REQUIRE(VipPostSend(from, fm.desc(1), fm.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d = nullptr;
    REQUIRE(VipRecvWait(to, vt::kWaitMs, &d) == VIP_SUCCESS);
    REQUIRE(d == tm.desc(0));
    uint64_t got = 0;
    memcpy(&got, rbuf, sizeof got);
    REQUIRE(got == seq);
    REQUIRE(VipSendWait(from, vt::kWaitMs, &d) == VIP_SUCCESS);
}

} // namespace

TEST_CASE("shm ring: request-reply traffic stays in the ring's first 32 KiB, a burst uses all "
          "of it",
          "[shm][ring]") {
    const uint64_t ring = std::stoull(vt::config_value("SHM_RING_SIZE"));
    REQUIRE(ring >= 8 * kRewind); // the default (512 KiB): far more than the rewound part
    Link l;
    uint64_t seq = 0;
    // Twice round the rewound part of both rings first: its pages are touched.
    for (uint32_t i = 0; i < 2 * kRewind / 64; ++i) {
        one_way(l.p.b, l.mb, l.p.a, l.ma, seq++);
        one_way(l.p.a, l.ma, l.p.b, l.mb, seq++);
    }
    const long before = rss_shmem_kib();
    // 64 bytes of ring a message: five laps of each ring were they gone round whole.
    const long trips = static_cast<long>(5 * ring / 64);
    for (long i = 0; i < trips; ++i) {
        one_way(l.p.b, l.mb, l.p.a, l.ma, seq++);
        one_way(l.p.a, l.ma, l.p.b, l.mb, seq++);
    }
    const long grown = rss_shmem_kib() - before;
    INFO("RssShmem grew by " << grown << " KiB over " << trips << " round trips");
    // Gone round whole, each ring's pages would be touched through both mappings: four
    // times (ring - 32 KiB), 1,920 KiB by default.  Kept to its first 32 KiB: none.
    CHECK(grown < 64);

    // A burst the receiver does not take meanwhile, its first message the one that goes
    // back to the ring's start (the round trips above ended a rewound part exactly): 4
    // KiB messages filling most of the ring, every one copied into it (none left for the
    // receiver to fetch from the sender: that would mean the ring had less room than it
    // has, as when a pad record marked the rewind and held the lines behind it).
    const uint32_t kLen = 4096;
    const auto n = static_cast<uint32_t>((ring - 16 * 1024) / (kLen + 64));
    REQUIRE(n * kLen <= (2u << 20));
    uint8_t *rbase = l.ma.base + (1 << 20), *sbase = l.mb.base + (1 << 20);
    for (uint32_t i = 0; i < n; ++i) {
        vt::set_desc(l.ma.desc(i), rbase + size_t{i} * kLen, kLen, l.ma.mh);
        REQUIRE(VipPostRecv(l.p.a, l.ma.desc(i), l.ma.mh) == VIP_SUCCESS);
    }
    const VIP_VI_COUNTERS c0 = counters(l.p.b);
    for (uint32_t i = 0; i < n; ++i) {
        uint8_t *s = sbase + size_t{i} * kLen;
        memset(s, static_cast<int>(i & 0xff), kLen);
        memcpy(s, &i, sizeof i);
        vt::set_desc(l.mb.desc(i), s, kLen, l.mb.mh);
        REQUIRE(VipPostSend(l.p.b, l.mb.desc(i), l.mb.mh) == VIP_SUCCESS);
    }
    const VIP_VI_COUNTERS c1 = counters(l.p.b);
    CHECK(c1.CopySends - c0.CopySends == n);
    CHECK(c1.GetSends - c0.GetSends == 0);
    for (uint32_t i = 0; i < n; ++i) {
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipRecvWait(l.p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
        REQUIRE(d == l.ma.desc(i));
        REQUIRE(d->CS.Length == kLen);
        const uint8_t *r = rbase + size_t{i} * kLen;
        uint32_t got = 0;
        memcpy(&got, r, sizeof got);
        CHECK(got == i);
        CHECK(r[kLen - 1] == static_cast<uint8_t>(i & 0xff));
    }
    for (uint32_t i = 0; i < n; ++i) {
        VIP_DESCRIPTOR *d = nullptr;
        REQUIRE(VipSendWait(l.p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
    }
    // And request-reply again after the burst, across the rewinds it makes.
    for (int i = 0; i < 20000; ++i) {
        one_way(l.p.b, l.mb, l.p.a, l.ma, seq++);
        one_way(l.p.a, l.ma, l.p.b, l.mb, seq++);
    }
}
