// A fleet of processes holding many connected VIs: `servers` server
// processes and as many client processes, each holding `per_proc` VIs.
// Client c connects its i-th VI to server (c + i) % servers, so every server
// accepts per_proc connections.  Each VI then carries one message in each
// direction whose content names its connection, and everything is torn
// down.  The coordinator (the caller) measures memory between the phases.
//
// Used by the scale test and by the VI-scale benchmark; nothing here uses
// Catch2: failures come back in FleetResult::err.
#pragma once

#include "scale_util.h"

#include <functional>
#include <string>

namespace vt {

struct FleetPlan {
    int servers = 16;       // and as many clients
    int per_proc = 4096;    // VIs per process
    uint32_t msg = 64;      // bytes of each message
    std::string prefix;     // of every discriminator used (unique to the run)
    double timeout_s = 200; // for the whole run; workers still alive then are killed
    // Then enough 512-byte messages each way to go once round every ring, so
    // that all of a connection's ring pages are resident: what an idle VI
    // that carried traffic before costs.
    bool wrap = true;
};

struct FleetResult {
    std::string err; // "" when every phase succeeded everywhere
    int workers = 0;
    long long vis = 0, connections = 0;
    long long connected = 0;        // VIs that reached the Connected state
    long long messages_checked = 0; // received with the right length and content
    long long sends_completed = 0;  // without error
    long long destroyed = 0;        // VIs destroyed with VIP_SUCCESS
    double setup_s = 0, exchange_s = 0, wrap_s = 0, teardown_s = 0;
    long long wrap_messages = 0; // checked, both directions
    // /proc/meminfo: workers ready (NIC open, memory registered, no VI),
    // connected, after the messages, after the rings went round, VIs
    // destroyed, workers exited.
    MemInfo ready, connected_idle, after_messages, after_wrap, destroyed_vis, exited;
    // Sums over the workers of /proc/PID/smaps_rollup at the first four points.
    ProcMem p_ready, p_connected, p_messages, p_wrap;
    // Sums over the workers of open descriptors and mappings.
    long long fds_ready = 0, fds_connected = 0, maps_ready = 0, maps_connected = 0;
    // Workers whose descriptor and mapping counts were back to what they were
    // before the NIC was opened once everything was closed (all, when clean).
    int clean_workers = 0;
    std::string unclean; // what the first worker that was not clean still held
    // Connection mappings still present after the VIs were destroyed (sum).
    long long conn_maps_left = 0;
    // Listening sockets of the run still bound after the workers exited.
    int sockets_left = 0;
    // RLIMIT_NOFILE the workers set for themselves.
    long long nofile = 0;
};

// Bytes of each direction's ring of a connection (VIPL_SHM_RING_SIZE in effect).
uint32_t ring_size();

// Descriptors a worker holding n VIs needs (3 per connected VI, plus its own).
long long fleet_nofile(int per_proc);

// A plan for `vis` VIs (rounded up to what the layout allows) over the fewest
// processes, 16 + 16 at least, that stay within the per-process limits this
// process tree may reach: RLIMIT_NOFILE (raised by the workers themselves)
// and vm.max_map_count.
FleetPlan fleet_plan(long long vis);

// Runs the fleet.  `log` receives progress lines (may be empty).
FleetResult run_fleet(const FleetPlan &plan, const std::function<void(const std::string &)> &log);

// KiB of memory per VI between two points: the kernel's share (Shmem,
// PageTables, KernelStack from /proc/meminfo, slab objects from
// /proc/slabinfo: vt::slab_growth) plus the workers' private memory (sum of
// Pss_Anon).  proc_slab: /proc entries other programs instantiated meanwhile,
// left out; slab_pages: the growth of meminfo's Slab (pages), less those.
struct PerVi {
    double shmem, slab, proc_slab, slab_pages, page_tables, kernel_stack, anon, total;
    double mem_available, mem_free, pss, rss; // cross-checks
};
PerVi per_vi(const MemInfo &a, const MemInfo &b, const ProcMem &pa, const ProcMem &pb,
             long long vis);

} // namespace vt
