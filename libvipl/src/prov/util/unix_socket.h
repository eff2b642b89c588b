// What the providers and the core share about unix-domain sockets (as libfabric's
// prov/util does): abstract names, and messages that carry descriptors.
//
// Abstract names live in the network namespace, not in a directory: nothing to clean
// up after a crash, gone with the last socket bound to them.  Descriptors received here
// are close-on-exec and registered with the fork bookkeeping (core/fds.h) like every
// descriptor the library owns.
#pragma once

#include <cstddef>
#include <string_view>
#include <sys/socket.h>
#include <sys/un.h>

namespace vipl::util {

// The abstract address of name (no trailing NUL: the length bounds it).  Returns the
// address length, or 0 when name does not fit in sun_path.
socklen_t abstract_address(std::string_view name, sockaddr_un *sa);

// A non-blocking SOCK_SEQPACKET unix socket, close-on-exec, tracked; -1 and errno.
int seqpacket_socket();

// The most descriptors one message carries.
constexpr int kMaxFds = 4;

// Sends one message of len bytes with nfds (<= kMaxFds) descriptors; never raises
// SIGPIPE.  True when the whole message went.
bool send_with_fds(int sock, const void *msg, size_t len, const int *fds, int nfds);

// Receiving one message.  no_room: it came, but not all its descriptors (this process
// is at its descriptor limit); again: nothing yet; timeout and interrupted: what a
// caller that waits for it reports (recv_with_fds itself never waits).
enum class Recv { ok, eof, timeout, interrupted, error, no_room, again };

// Receives one message of exactly len bytes if one is there.  Up to max_fds of its
// descriptors go to fds (*nfds of them), close-on-exec and tracked; any beyond are
// closed.  A message of another length is an error (its descriptors still delivered).
Recv recv_with_fds(int sock, void *msg, size_t len, int *fds, int max_fds, int *nfds);

} // namespace vipl::util
