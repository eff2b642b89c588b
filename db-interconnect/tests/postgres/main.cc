// The PostgreSQL tests' main: Catch2's, after making this process the subreaper of what
// the tests start (a postmaster outlives its pg_ctl) and removing what runs that were
// killed outright left behind.  After every test case, whatever it started and did not
// reap is killed and reaped; a test process ended by a signal kills its programs and
// postmasters first.
#define CATCH_CONFIG_EXTERNAL_INTERFACES // Reaper, a listener
#include <catch2/catch.hpp>

#include "case_guard.h"
#include "catch_run.h"

#include "program.h"
#include "scratch.h"

#include <signal.h>

namespace {

void on_end(int sig) {
    pgt::kill_registered();
    signal(sig, SIG_DFL);
    raise(sig);
}

struct Reaper : Catch::TestEventListenerBase {
    using TestEventListenerBase::TestEventListenerBase;
    void testCaseEnded(const Catch::TestCaseStats &) override { pgt::kill_and_reap_descendants(); }
};

} // namespace

CATCH_REGISTER_LISTENER(Reaper)

// Every case is checked for what it leaves behind (libvipl/tests/support/case_guard.h).
[[gnu::used]] static const int *const g_guard = &vt::case_guard_registered;

int main(int argc, char **argv) {
    pgt::become_subreaper();
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) signal(sig, on_end);
    // A program that dies leaves its pipe broken: the test sees the error, not a signal.
    signal(SIGPIPE, SIG_IGN);
    pgt::remove_stale_scratch();
    return vt::run_catch(argc, argv);
}
