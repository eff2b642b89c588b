// A connection that rides vipl and stays open across exec (FD_CLOEXEC clear: inetd's
// pattern, a server that re-execs itself) goes back to its kernel socket first, since a
// stream's state lives in the old program image.
//
// Before the exec, this side flushes what it wrote, sends a switching end of stream
// (Stream::switch_out) and reads what the peer still sends on the stream until the
// peer's own switching end; the peer's interposer switches at its next call on the
// socket (its reads give the stream's bytes first, then the kernel's).  The bytes read
// here are handed to the new image in a memfd named by VIPL_HANDOVER (fd:memfd:length:
// kernel-first), which delivers them before the kernel socket's own; kernel-first
// counts a server's bytes still due on the kernel connection before the stream's.
// Bounded by VIPL_DB_NEGOTIATE_MS: a peer that does not switch in time gets a reset.
//
// Thread rules: exec runs on one thread; the rest of the process goes with it.
#pragma once

#include "sock.h"

#include <string>

namespace vipl::db {

constexpr char kHandoverVar[] = "VIPL_HANDOVER";

// Before exec: hands over every vipl socket that stays open; returns the VIPL_HANDOVER
// value for the new image's environment ("" when none).
std::string handover_before_exec() noexcept;
// In a new image: takes the connections handed over (and removes the variable).
void handover_adopt() noexcept;
// The peer's side: the stream ended with a switch; from now on the kernel socket.
// With s->mu held or from the socket's own call path.
void switch_to_kernel(Sock *s, int fd) noexcept;

} // namespace vipl::db
