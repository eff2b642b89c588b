// The test programs' main: Catch2's, after making this process the subreaper of the
// programs the tests start and arranging that they end with it (process.h).
#include "case_guard.h"
#include "catch_run.h"

#include "process.h"

#include <signal.h>

namespace {

// A test process that is being ended (ctest's timeout, a user's Ctrl-C) takes the
// programs it started with it.
void on_end(int sig) {
    dbt::kill_every_group();
    signal(sig, SIG_DFL);
    raise(sig);
}

} // namespace

// Every case is checked for what it leaves behind (libvipl/tests/support/case_guard.h).
[[gnu::used]] static const int *const g_guard = &vt::case_guard_registered;

int main(int argc, char **argv) {
    dbt::become_subreaper();
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) signal(sig, on_end);
    // A program that dies leaves its pipes broken; the test sees the error, not a signal.
    signal(SIGPIPE, SIG_IGN);
    return vt::run_catch(argc, argv);
}
