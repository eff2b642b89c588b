// Blocking stream sockets, latency and bandwidth: --variant unix (a socketpair),
// unix-path (a listening socket file) or tcp.
#include "sock_peer.h"

int main(int argc, char **argv) {
    bench::Options o = bench::parse_options(argc, argv);
    return bench::run(o, *bench::sock_transport());
}
