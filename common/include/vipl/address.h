// Where one end of a stream is, as the kernel reports it (libvipl's
// VipQueryViEndpoints), never as the peer describes itself.
//
// Thread and signal rules: a plain value; to_string() allocates (not async-signal-safe).
#pragma once

#include "vipl/uri.h"

#include <cstdint>
#include <string>

namespace vipl {

struct Address {
    // shm or tcp; automatic only in an empty Address (that of an empty stream).
    Transport provider = Transport::automatic;
    // tcp: the numeric IP address of the socket ("127.0.0.1", "::1", no brackets).
    // shm: this host's name (both ends are on it).
    std::string host;
    // tcp: the TCP port of the socket; a tcp Listener with a service name: 0 (the
    // provider derives the TCP port from the name).  shm: the listener's port at the
    // listening end, 0 at the connecting end and for a service name.
    uint16_t port = 0;
    // The listener's service name (Uri::service) at the listening end, if it has one.
    std::string service;
    // shm: the process at that end, its user and group.  For the peer these are the
    // kernel's (SO_PEERCRED), taken when the connection was made: at the connecting
    // end, the process that served the listener.  -1 on tcp.
    long pid = -1;
    long uid = -1;
    long gid = -1;

    bool empty() const { return provider == Transport::automatic; }

    // For logs: "tcp 127.0.0.1:5432", "tcp [::1]:40112", "shm db1:5432 pid 812 uid 107
    // gid 113", "shm db1/pg-7 pid 812 uid 107 gid 113", "shm db1 pid 90 uid 0 gid 0";
    // "" when empty.
    std::string to_string() const;

    bool operator==(const Address &) const = default;
};

} // namespace vipl
