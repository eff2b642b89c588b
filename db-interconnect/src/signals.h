// The program's signal handlers run through a trampoline of ours, so that the interposer
// knows when a handler runs (thread_state.h: in a handler it makes no connection of its
// own and takes no lock) and whether the handler asked for SA_RESTART (a blocking call
// of ours that a handler interrupted restarts or fails with EINTR as the kernel's would).
//
// The interposer installs no handler of its own choosing and sends no signal but SIGPIPE
// where the kernel would.  It holds signals in one place only: a client thread handing
// its connection to the server's rendezvous, for that round trip (negotiate.cc).  sigaction()
// reports the program's own action back; SIG_DFL and SIG_IGN are installed as given.
#pragma once

#include <signal.h>

namespace vipl::db {

int install_action(int sig, const struct sigaction *act, struct sigaction *old) noexcept;

} // namespace vipl::db
