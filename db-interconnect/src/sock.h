// One interposed socket (an open file of the program: every fd that dup or fork made of
// it shares this state) and the negotiation that decides whether its bytes ride a VI
// stream or the kernel connection.
//
// States (see hello.h for the messages):
//   fresh        a stream socket not yet connected or listening: kernel calls, but known,
//                so that an epoll registration made now follows what it becomes
//   listening    a listener VIPL_DB_LISTEN selects; it publishes a marker (marker.h), and
//                the connections it accepts start undecided
//   connecting   client, a non-blocking connect to a candidate destination in progress
//   hello_sent   client, HELLO written, REPLY not read yet; the program's writes go to the
//                kernel connection meanwhile, counted (pre_bytes): once the stream is up,
//                its first bytes tell the server how many to read there first
//   undecided    server, accepted: the first bytes the client sent are not seen yet
//   accepting    server, REPLY written: the client's stream comes to the rendezvous when
//                the client has read it; until then the program reads the client's bytes
//                on the kernel connection (counted in pre_bytes), and a write waits for
//                the stream (bounded: then both stay on the kernel)
//   strip_hello  server, decided for the kernel by writing before reading: a HELLO that
//                arrives first is dropped unanswered (the client then stays on the kernel)
//   strip_reply  client that gave up waiting (fork): a REPLY that arrives first is dropped
//                (the server, getting no stream, stays on the kernel too)
//   plain        the kernel connection carries the bytes; nothing more to decide
//   vipl         the stream carries the bytes; the kernel connection stays open, idle
//                (a server first reads there the pre_bytes its client wrote before)
// A decision is made in the process that makes the call, at the first call that needs
// it; fork waits for a client's decision in progress (fork.cc), so that parent and child
// never decide apart.  A connection that has carried no byte when its process forks is
// decided by the first process that reads from it.
//
// Lock order: Sock::mu, then the epoll bookkeeping lock (epoll_set.h).  Blocking waits
// (the stream's, the negotiation's) are made without Sock::mu.
#pragma once

#include "files.h"
#include "hello.h"

#include "vipl/spin.h"
#include "vipl/stream.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace vipl::db {

struct Member;
struct StatSlot;

enum class SockState : uint8_t {
    fresh,
    listening,
    connecting,
    hello_sent,
    undecided,
    accepting,
    strip_hello,
    strip_reply,
    plain,
    vipl,
};

const char *state_name(SockState s);

struct Sock : File {
    Sock() : File(Kind::sock) {}

    std::mutex mu;
    // Written under mu; read without it by readiness bookkeeping (epoll_set.cc).
    std::atomic<SockState> state{SockState::fresh};
    int family = 0;
    bool nonblock = false; // O_NONBLOCK of the open file (cached; re-read after fork)
    bool flags_stale = false;
    int rcv_timeout_ms = 0; // SO_RCVTIMEO / SO_SNDTIMEO, 0 = none
    int snd_timeout_ms = 0;
    bool shut_rd = false;
    bool shut_wr = false;
    bool reset_told = false;  // a broken stream's reset was reported once (then: end)
    bool send_failed = false; // a send found the connection gone (TCP then hangs up)

    // listening
    int marker_fd = -1;
    // connecting / hello_sent
    bool remote_rule = false; // the destination matched VIPL_DB_REMOTE
    sockaddr_storage dest{};  // where the program connected (a unix path as it gave it)
    socklen_t dest_len = 0;
    Provider provider = Provider::shm;
    Hello hello;
    uint32_t server_tag = 0; // the server's marker, for the one-CPU memo (one_cpu_memo.h)
    // Bytes of the program's that travel on the kernel connection before the stream's:
    // a client counts what it wrote while waiting for the REPLY; a server, what it still
    // has to read there (the stream's first bytes say how many).
    uint64_t pre_bytes = 0;
    // plain, after a hand-over (handover.h): bytes the stream delivered that come before
    // the kernel connection's (after pre_bytes of its own, if any)
    std::string prefix;
    size_t prefix_off = 0;
    // accepting
    vipl::Listener rendezvous;
    std::chrono::steady_clock::time_point rendezvous_until{};
    std::chrono::steady_clock::time_point neg_deadline{};
    // vipl
    vipl::Stream stream;

    std::vector<Member *> members; // epoll registrations (under the epoll lock)
    StatSlot *stat = nullptr;
    uint64_t spun = 0, slept = 0; // waits of the interposer's (poll, epoll) on this stream
};

// --- making tracked sockets (api_socket.cc calls these)
// A Sock from the pool with no reference: fd_install it.
Sock *sock_new(SockState state, int family) noexcept;
// Gives up tracking a socket that will stay on the kernel (its registrations go back to
// the program's own), when fd is its only descriptor; else it stays tracked, plain.
void sock_untrack(Sock *s, int fd) noexcept;
// A listener that VIPL_DB_LISTEN selects: publish its marker.
void sock_listening(Sock *s, int fd) noexcept;
// After a client's kernel connect completed (or failed): send HELLO or go plain.
void client_connected(Sock *s, int fd) noexcept;

// --- I/O: the wrappers' bodies for tracked sockets.  Return values and errno as the
// kernel's, or kKernel: the call goes to the kernel with the program's own arguments.
// `fd` is the descriptor of the call (the kernel connection).
constexpr ssize_t kKernel = -2;
ssize_t sock_recv(Sock *s, int fd, const iovec *iov, int iovcnt, int flags) noexcept;
ssize_t sock_send(Sock *s, int fd, const iovec *iov, int iovcnt, int flags) noexcept;
// FIONREAD for a vipl socket; -1 when the kernel's count applies.
int sock_readable_bytes(Sock *s) noexcept;
int sock_shutdown(Sock *s, int fd, int how) noexcept;

// --- readiness (poll.cc, epoll_set.cc)
// What to sleep on for `want` (poll bits): the kernel connection or the stream's fd.
struct Under {
    int fd = -1;
    short events = 0;
    bool stream = false; // the fd is the stream's: its readiness says "look again"
    int fd2 = -1;        // a second one: a rendezvous's listener (readiness: look again)
};
// Looks at the socket now, making progress (a negotiation step whose answer has come,
// the stream's completions); returns the poll bits that hold for `want` (plus POLLERR,
// POLLHUP, POLLRDHUP as the kernel reports them), and what to sleep on otherwise.
// `kernel_revents`: what a poll of the kernel connection just reported (0: not polled).
// `edge`: the waiter wants every new arrival (EPOLLET): the stream's fd is armed even
// while data waits here.  `first`: a wait's first look, which arms before it sleeps: a
// read that just found nothing stands for the stream's look
// (Stream::events_before_arming).
short sock_poll(Sock *s, int fd, short want, short kernel_revents, Under *under, bool edge = false,
                bool first = false) noexcept;
// How many messages arrived on a vipl socket's stream so far (edges of EPOLLET).
uint64_t sock_arrivals(Sock *s) noexcept;
// Bytes of a plain socket that come before its kernel connection's (a hand-over).
inline bool has_prefix(const Sock *s) {
    return s->prefix_off < s->prefix.size();
}
// A vipl socket's readiness as the kernel would report it (see sock.cc).
// With arm_for >= 0 the stream's wait fd is armed when none of arm_for holds (before a
// sleep: Stream::arm; `kernel_edge`: the sleep watches it with EPOLLET, see sock_arm).
short vipl_events(Sock *s, short arm_for = -1, bool kernel_edge = false) noexcept;
// Before sleeping on what sock_under gave: a stream arms its wait fd (nothing is lost
// between this look and the sleep); returns what holds of `want` already (0 for other
// states: the kernel's readiness is level-triggered).  `edge`: armed even while data
// waits (an edge-triggered waiter's filter decides what is new).  `kernel_edge`: the
// sleep watches the wait fd with EPOLLET alone (an epoll set's registration), so the
// arming leaves the doorbell's count unread (Stream::arm's `edge`).
short sock_arm(Sock *s, int fd, short want, bool edge = false, bool kernel_edge = false) noexcept;
// In place of sock_arm and a sleep on the stream's wait fd, for a waiter on this one
// socket alone (poll of one descriptor): libvipl's own sleep, a system call less per
// wake-up (vipl::Stream::sleep_for).  1: *revents holds what is ready of `want` (no
// sleep); 0: slept until an event or the deadline (look again); -1: a signal handler
// ran; 2: not for this socket now (another state, or another process holds the stream).
int sock_sleep(Sock *s, short want, Deadline dl, short *revents) noexcept;
// What to sleep on in the socket's present state, without looking at it (no lock taken).
Under sock_under(Sock *s, int fd, short want) noexcept;
// What libvipl's spin policy allows a waiter on this socket now (none unless it rides a
// stream), and how the spin ended for it (vipl/spin.h).
vipl::SpinBudget sock_spin_budget(Sock *s) noexcept;
void sock_spin_outcome(Sock *s, bool won) noexcept;
// For vipl::Spin::report (a win counts for vipl-run --stat too).
struct SpinOf {
    Sock *s;
    void spin_outcome(bool won) const {
        if (won) ++s->spun;
        sock_spin_outcome(s, won);
    }
};
// Copies the stream's counters (messages, spins, sleeps) into the socket's row of the
// process's connection table (stats.h): before a sleep and at the end.
void sock_stat_sync(Sock *s) noexcept;

// --- the end of a connection without waiting for the peer (linger.cc)
// Closes a stream as the last close of its socket does: at once when other processes
// hold it too; else the end of stream goes out now and the stream lingers until the
// peer has taken everything (bounded by VIPL_DB_LINGER_MS), as the kernel would
// deliver for a socket closed before its peer read it.
void linger_stream(vipl::Stream &&s) noexcept;
// Drops lingering streams that are done (any call of the interposer may; cheap when
// none linger).
void linger_reap() noexcept;
namespace detail {
extern std::atomic<int> g_linger_count;
}
// Whether any stream lingers (a wait that skips linger_reap looks here first).
inline bool linger_any() noexcept {
    return detail::g_linger_count.load(std::memory_order_relaxed) != 0;
}
// At exit: waits (bounded) until every lingering stream and every stream still open is
// taken by its peer.  After fork, the child drops its copies of the parent's.
void linger_at_exit() noexcept;
void linger_after_fork_child() noexcept;

// --- process events
std::mutex &sock_pool_lock();
// Before fork: finish a client's decision in progress (bounded by VIPL_DB_NEGOTIATE_MS).
void sock_before_fork(Sock *s, int fd) noexcept;
void sock_after_fork_child(Sock *s) noexcept;

} // namespace vipl::db
