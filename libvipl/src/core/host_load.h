// Whether this host has a CPU with nothing to run: the spin policy's test for whether
// spinning is free.  A spinner on a host whose CPUs all have work takes its CPU from a
// task that has some (on a database node with more processes than CPUs, a remote call's
// long spin costs the node's own clients), so there it spins for the base budget only.
#pragma once

namespace vipl {

// True while the host's runnable tasks (the caller counted) are at most its online CPUs,
// or when that cannot be read.  Read from /proc/loadavg at most once per clock tick of
// the coarse clock (about a millisecond) per process; the answer in between is the last
// one read.  SPIN_ON_BUSY_HOST=1 makes it always true.  Thread safe; no lock.
bool host_has_idle_cpu();

// The runnable tasks of the host now (the caller counted), from /proc/loadavg; -1 when
// it cannot be read (no /proc, no fd left).  Uncached: for tests and the above.
int host_runnable_tasks();

} // namespace vipl
