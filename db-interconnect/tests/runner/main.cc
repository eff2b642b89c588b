// The test programs' main: Catch2's, after making this process the subreaper of the
// programs the tests start (process.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "process.h"

#include <signal.h>

int main(int argc, char **argv) {
    dbt::become_subreaper();
    // A program that dies leaves its pipes broken; the test sees the error, not a signal.
    signal(SIGPIPE, SIG_IGN);
    return Catch::Session().run(argc, argv);
}
