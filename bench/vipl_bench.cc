// libvipl, latency and bandwidth (shm by default; --devices for another
// provider); the spin budget comes from the environment (VIPL_SPIN_US).
#include "vipl_peer.h"

int main(int argc, char **argv) {
    bench::Options o = bench::parse_options(argc, argv);
    return bench::run(o, *bench::vipl_transport());
}
