// The negotiation steps of sock.h's state machine.  Every function is called with the
// socket's mutex held and the Inside guard set; the waits they make are bounded by
// VIPL_DB_NEGOTIATE_MS, so a peer that stops half way costs a connection its upgrade,
// never a hang.
#pragma once

#include "sock.h"

namespace vipl::db {

// hello_sent: looks for the server's first bytes.  True when the state changed (vipl or
// plain); false while nothing has come.
bool client_look(Sock *s, int fd) noexcept;
// hello_sent -> strip_reply: stop waiting; the program's bytes go to the kernel.
void client_give_up(Sock *s, int fd) noexcept;
// undecided: looks at the client's first bytes.  `writing`: the program writes before
// anything came, so if no HELLO is there yet the connection stays on the kernel
// (strip_hello).  True when the state changed.
bool server_look(Sock *s, int fd, bool writing) noexcept;
// accepting: takes the client's stream if it came (waiting until `wait` at most; a past
// deadline looks once); at the rendezvous's deadline gives up (plain).  True when the
// state changed.
bool accept_step(Sock *s, int fd, Deadline wait) noexcept;
// accepting -> plain: the rendezvous goes (a client coming later finds none and stays
// on the kernel too); the connection goes on on the kernel.  `why` is logged (nullptr:
// nothing).
void give_up_rendezvous(Sock *s, int fd, const char *why) noexcept;
// How long a non-blocking server's answer waits for the client's stream before it goes
// on the kernel (sock_io.cc, settle): a client that read the REPLY comes within a round
// trip, or a few scheduling delays on a loaded host; an event loop stalls this long at
// most for a client that cannot come.
constexpr auto kAnswerWait = std::chrono::milliseconds(200);

// strip_hello / strip_reply: drops a HELLO / REPLY at the head of the connection, then
// plain.  True when the state changed.
bool strip_look(Sock *s, int fd) noexcept;

// How long a thread waiting on a connection that is still negotiating sleeps on the
// kernel connection at a time.  Another thread of the process may finish the
// negotiation meanwhile (a writer thread reads the REPLY, takes the stream): after that
// nothing more comes on the kernel connection, so a sleeper must look again by itself.
// A negotiation lasts a round trip, so few sleepers ever see a second slice.
constexpr auto kNegotiationSlice = std::chrono::milliseconds(2);
// The states another thread may leave with nothing more coming on the kernel connection
// (each bounded by VIPL_DB_NEGOTIATE_MS, so slices end).
inline bool negotiating(SockState st) noexcept {
    return st == SockState::hello_sent || st == SockState::accepting;
}
inline Deadline negotiation_slice(Deadline dl) noexcept {
    Deadline s = Clock::now() + kNegotiationSlice;
    return s < dl ? s : dl;
}

// The stream options of the interposer's connections of a socket of `family`.
vipl::StreamOptions stream_options(int family);

} // namespace vipl::db
