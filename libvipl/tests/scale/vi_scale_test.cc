// The paper's VIA nodes stopped at 64,000 VIs; one host running libvipl must
// hold 131,072 connected VIs (65,536 connections, both ends counted), each
// carrying a message both ways, and take them all down again without
// leaving anything behind.
//
// The VIs are spread over processes so that none of them needs more than
// the usual per-process limits: a connected VI costs its process three
// descriptors (its eventfd, the connection's socket, the peer's eventfd) and
// one mapping, so 16 server and 16 client processes of 4,096 VIs each need
// about 12,300 descriptors and 4,200 mappings apiece (vm.max_map_count is
// 65,530; RLIMIT_NOFILE's hard limit is often 20,000 or more).  Each worker
// raises its own soft RLIMIT_NOFILE to what it needs, and its hard limit too
// when that is lower and the process may (root); when neither is possible
// the fleet uses more, smaller processes.  No system-wide setting is touched.
//
// Memory per VI = (the kernel's share: growth of Shmem + Slab + PageTables +
// KernelStack in /proc/meminfo) + (the workers' private memory: growth of
// the sum of their Pss_Anon), divided by the VIs.  Shmem holds the
// connection memfds once however many processes map them; per-process RSS
// would count each ring page twice, PSS splits it.  MemAvailable and MemFree
// are printed as cross-checks; they also move with anything else the
// machine does meanwhile.
//
// VIPL_SCALE_VIS=N runs a smaller fleet for a quick look (printed as such).
#include "fleet.h"
#include "support.h"

#include <cstdio>
#include <cstdlib>

namespace {

constexpr long long kTarget = 131072;
constexpr double kAimKiB = 16;

void print_per_vi(const char *when, const vt::PerVi &m) {
    printf("[measure] memory per connected VI, %s: %.2f KiB = Shmem %.2f + Slab %.2f + "
           "PageTables %.2f + KernelStack %.2f + workers' Pss_Anon %.2f\n",
           when, m.total, m.shmem, m.slab, m.page_tables, m.kernel_stack, m.anon);
    printf("[measure]   Slab counts objects (/proc/slabinfo); in slab pages (/proc/meminfo) "
           "%.2f KiB; left out: %.2f KiB of /proc inodes that other programs made by listing "
           "/proc/PID/fd\n",
           m.slab_pages, m.proc_slab);
    printf("[measure]   cross-checks per VI: MemAvailable drop %.2f KiB, MemFree drop %.2f KiB, "
           "workers' PSS %.2f KiB, workers' RSS %.2f KiB (counts each shared ring page in both "
           "processes)\n",
           m.mem_available, m.mem_free, m.pss, m.rss);
}

} // namespace

TEST_CASE("131072 connected VIs on one host, each carrying a message both ways, all torn down",
          "[scale]") {
    long long target = kTarget;
    if (const char *e = getenv("VIPL_SCALE_VIS")) target = std::max(4LL, atoll(e));
    vt::FleetPlan p = vt::fleet_plan(target);
    p.prefix = vt::unique_disc("-");
    p.timeout_s = 200;
    printf("[measure] fleet: %d server + %d client processes, %d VIs each, RLIMIT_NOFILE %lld "
           "per worker%s\n",
           p.servers, p.servers, p.per_proc, vt::fleet_nofile(p.per_proc),
           target != kTarget ? " (VIPL_SCALE_VIS: reduced run)" : "");
    fflush(stdout);

    vt::FleetResult r = vt::run_fleet(p, [](const std::string &s) {
        printf("  %s\n", s.c_str());
        fflush(stdout);
    });
    INFO(r.err);
    CHECK(r.err.empty());
    printf("[measure] VIs connected: %lld of %lld (%lld connections)\n", r.connected, r.vis,
           r.connections);
    REQUIRE(r.err.empty());

    CHECK(r.vis >= target);
    CHECK(r.connected == r.vis);
    CHECK(r.messages_checked == r.vis);
    CHECK(r.sends_completed == r.vis);
    CHECK(r.wrap_messages >= 8 * r.vis);
    CHECK(r.destroyed == r.vis);
    // Nothing survives the VIs: no connection mapping after VipDestroyVi, every
    // worker back to its descriptors and mappings of before VipOpenNic, no
    // listening socket after exit.
    CHECK(r.conn_maps_left == 0);
    CHECK(r.clean_workers == r.workers);
    CHECK(r.sockets_left == 0);

    printf("[measure] set-up: %lld connections (%lld VIs) in %.2f s = %.0f connections/s, "
           "%.0f VIs/s (creating the VIs, posting a receive, connecting)\n",
           r.connections, r.vis, r.setup_s, r.connections / r.setup_s, r.vis / r.setup_s);
    printf("[measure] one message each way on every VI, content checked: %.2f s; then %lld "
           "messages of 512 B (every ring once round): %.2f s; teardown (disconnect + destroy): "
           "%.2f s = %.0f VIs/s\n",
           r.exchange_s, r.wrap_messages, r.wrap_s, r.teardown_s, r.vis / r.teardown_s);
    double fds_per_vi = double(r.fds_connected - r.fds_ready) / r.vis;
    double maps_per_vi = double(r.maps_connected - r.maps_ready) / r.vis;
    printf("[measure] per connected VI: %.2f descriptors, %.2f mappings\n", fds_per_vi,
           maps_per_vi);
    vt::PerVi idle = vt::per_vi(r.ready, r.connected_idle, r.p_ready, r.p_connected, r.vis);
    vt::PerVi used = vt::per_vi(r.ready, r.after_messages, r.p_ready, r.p_messages, r.vis);
    print_per_vi("idle, before any message", idle);
    print_per_vi("idle, after one message each way", used);
    vt::PerVi full = vt::per_vi(r.ready, r.after_wrap, r.p_ready, r.p_wrap, r.vis);
    print_per_vi("idle, after traffic went once round every ring (all ring pages resident)", full);
    long long shm_left = r.exited.shmem - r.ready.shmem;
    printf("[measure] after teardown: Shmem %+lld KiB with the VIs destroyed, %+lld KiB once the "
           "workers exited (vs. %+lld KiB while connected)\n",
           r.destroyed_vis.shmem - r.ready.shmem, shm_left, r.after_messages.shmem - r.ready.shmem);
    fflush(stdout);

    // Three descriptors and one mapping per VI; per process, a listening socket
    // (servers) and one mapping of each peer process's region table.
    CHECK(r.fds_connected - r.fds_ready <= 3 * r.vis + r.workers);
    CHECK(r.maps_connected - r.maps_ready <= r.vis + r.workers * (p.servers + 4));
    // The aim, with 8 KiB rings each way (ctest sets them: CMakeLists.txt).
    std::string ring = vt::config_value("SHM_RING_SIZE");
    if (ring == "8192") {
        CHECK(idle.total <= kAimKiB);
        CHECK(used.total <= kAimKiB);
        // A VI that once carried a ring's worth keeps all its ring pages: reported, not
        // held to the aim (the requirement's VIs carry one message).
        printf("[measure] all ring pages resident: %.2f KiB per VI, %s the %.0f KiB aim\n",
               full.total, full.total <= kAimKiB ? "within" : "above", kAimKiB);
    } else {
        printf("[measure] VIPL_SHM_RING_SIZE=%s: the %.0f KiB aim (8 KiB rings) not checked\n",
               ring.c_str(), kAimKiB);
    }
    // The connection memory went with the VIs (other programs may use a little Shmem meanwhile).
    CHECK(r.destroyed_vis.shmem - r.ready.shmem < (r.after_messages.shmem - r.ready.shmem) / 20);
}
