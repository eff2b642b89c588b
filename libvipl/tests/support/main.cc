#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

int main(int argc, char **argv) {
    // These tests hold the adaptive spin policy to its rules; whether the host has an
    // idle CPU (other tests run beside them) must not switch spinning off under them.
    // A test of that rule runs a fresh copy of the program with the key set to 0.
    setenv("VIPL_SPIN_ON_BUSY_HOST", "1", 0);
    return Catch::Session().run(argc, argv);
}
