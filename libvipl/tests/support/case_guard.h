// Every test case of a program linking the support library is checked for what
// it leaves behind, as UCX's test base does: a descriptor, a thread, a
// /dev/shm entry named after libvipl or this process, or an error line the
// library logged that the case did not announce.  The check runs around each
// run of a case (each leaf section) and fails the case with the list.
//
// What the libraries keep for the whole process once started is not a leak:
// libvipl's notification thread ("vipl-notify") and that thread's epoll and
// eventfd descriptors, and the database interposer's statistics table (a
// memfd "vipl-db-stats", made at its first connection, read by vipl-run
// --stat), and ThreadSanitizer's background thread (started before the first
// case).  Everything else libvipl makes belongs to a NIC, VI, CQ or
// connection and goes with it.
#pragma once

#include <string>

namespace vt {

// The case provokes library errors on purpose: lines containing `part`,
// logged until the case ends, are expected.  Say what the error is, e.g.
// expect_logged("not a non-blocking eventfd").
void expect_logged(const std::string &part);

// The guard is linked in by the test main (support/main.cc); a program with a
// main() of its own (returning vt::run_catch, catch_run.h) links it by naming this.
extern const int case_guard_registered;

} // namespace vt
