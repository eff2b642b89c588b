// Catch2's implementation, compiled once for every test program of the project (the test
// files include only its declarations), and the session that runs it (catch_run.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_run.h"

int vt::run_catch(int argc, char **argv) {
    return Catch::Session().run(argc, argv);
}
