// Same-host markers: how a client learns that the server it connects to runs the
// interconnect, without sending a byte the server could misread.
//
// A listening socket that VIPL_DB_LISTEN selects gets a marker: an abstract datagram
// socket named after the address it listens on ("vipl-db/tcp/127.0.0.1:5432",
// "vipl-db/tcp/*:5432" for a wildcard address, "vipl-db/unix/<dev>:<inode>" for a unix
// socket file).  The marker lives exactly as long as the listening socket: it is closed
// with the listener's last descriptor (a fork child that closes its copy of the listener
// closes its copy of the marker), and the kernel removes it when its last holder dies.
// A client probes the name of the address it connected to with connect(2) on a datagram
// socket: no packet is sent, nobody is woken.  Abstract names belong to a network
// namespace, as TCP ports do; a unix socket reached from another namespace has no
// visible marker and stays on the kernel.
//
// Thread rules: thread-safe.  Not async-signal-safe (never called from a handler).
#pragma once

#include <sys/socket.h>

#include <string>

namespace vipl::db {

// The marker name of a listening address (from getsockname of the listener); "" when the
// address has none (unbound, unnamed unix socket, unknown family).
std::string marker_name(const sockaddr *sa, socklen_t len);

// The names a client connected to `peer` probes, most specific first (exact address,
// then the wildcard one); empty when none applies.
std::string marker_probe_names(const sockaddr *peer, socklen_t len, std::string *wildcard);

// Binds a marker; returns its descriptor (close-on-exec) or -1 (name taken, no fds).
int marker_publish(const std::string &name);

// Whether a marker of that name exists (some process publishes it now).
bool marker_exists(const std::string &name);

} // namespace vipl::db
