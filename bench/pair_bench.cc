// The tcp provider and plain TCP sockets between the same two processes,
// latency only: blocks of round trips alternate between them, so the ratio
// compares runs made moments apart on a shared, noisy host.  Transport 0 is
// libvipl on --devices (spin budget from VIPL_SPIN_US), transport 1 the
// socket --variant (tcp).
#include "sock_peer.h"
#include "vipl_peer.h"

int main(int argc, char **argv) {
    bench::Options o = bench::parse_options(argc, argv);
    return bench::run_paired(o, *bench::vipl_transport(), *bench::sock_transport());
}
