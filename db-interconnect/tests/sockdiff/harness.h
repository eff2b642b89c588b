// sockdiff: a socket scenario run by one program that prints what it observed, one fact a
// line, so that a run without the interposer and a run with it can be compared line by
// line (compare.cc).  This header is what every scenario uses: the transcript and checks,
// results and their names, patterned data, the scenario's address family, peer processes.
//
// A transcript holds only what the kernel's semantics fix: call results and errno names,
// readiness bits, byte counts a program may rely on, checksums.  What legitimately
// differs between two correct implementations (how many bytes a non-blocking send took
// before EAGAIN, pids, ports, timings, how many calls a loop needed) is printed
// normalised ("send filled", "pid = client", "within 100 ms").
//
// Processes: the main process is the client side of a scenario; every server side and
// other peer is a fork of it (spawn), so all run in the same mode.  A peer's transcript
// lines go to a file its parent copies into its own transcript when it joins it, prefixed
// with the peer's role, so the order of lines never depends on scheduling.
//
// Every wait is bounded (kWaitMs for what must happen; kQuietMs watched for what must
// not); a watchdog ends a run that takes over a minute in all.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include "clock.h"
#include <cstdint>

#include <functional>
#include <string>
#include <vector>

namespace sockdiff {

constexpr int kWaitMs = 5000;
constexpr int kQuietMs = 50;

using vipl::db::test::now_ns; // CLOCK_MONOTONIC: one clock for every process
using vipl::db::test::sleep_ms;

// ------------------------------------------------------------------ the transcript
// One line of this process's transcript.
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// A diagnostic on stderr (not part of the transcript).
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// A check of the scenario's own: a failure adds "FAILED: <what>" to the transcript and
// makes the run fail.  Returns ok.
bool check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// A failure after which the process cannot go on: logged as a check, then it exits
// (the main process kills its peers first).
[[noreturn]] void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int failures();
// Counts a failure reported elsewhere (on stderr only).
void count_failure();

// ------------------------------------------------------------------ results
// A call's result with the errno it left (captured when res() runs, right after the call).
struct Res {
    long v;
    int err;
};
Res res(long v);
std::string text(Res r); // "5", "-1 EAGAIN"
const char *errname(int e);
// poll/epoll bits as words, "-" for none: "IN OUT RDHUP HUP ERR NVAL" (poll and epoll
// share the values of these bits).
std::string events_text(uint32_t ev);
std::string status_text(int status); // a waitpid status: "exit 0", "killed by SIGPIPE"

// ------------------------------------------------------------------ data
// The byte at stream offset `off` of pattern `seed`.
uint8_t pattern_byte(uint64_t off, uint32_t seed);
void fill(uint8_t *p, size_t n, uint64_t off, uint32_t seed);
// FNV-1a over bytes, continued from `h` (start with kCrcStart).
constexpr uint32_t kCrcStart = 2166136261u;
uint32_t crc(const void *p, size_t n, uint32_t h = kCrcStart);
// The checksum of n pattern bytes from offset 0.
uint32_t pattern_crc(size_t n, uint32_t seed);

// Blocking I/O with bounded waits (poll before each call).  send_all sends with
// MSG_NOSIGNAL; recv_exact stops early at the end of the stream or an error.
// Both return the bytes moved; *last gets the failing call's result (v 0 at EOF).
size_t send_all(int fd, const void *p, size_t n, Res *last = nullptr, int timeout_ms = kWaitMs);
size_t recv_exact(int fd, void *p, size_t n, Res *last = nullptr, int timeout_ms = kWaitMs);
// Sends n bytes of pattern seed (from offset 0); returns bytes sent.
size_t send_pattern(int fd, size_t n, uint32_t seed, Res *last = nullptr);
// Waits up to timeout_ms for poll bits `events` on fd; the revents (0 on timeout).
short wait_for(int fd, short events, int timeout_ms);
// FIONREAD once it reaches at least `want` (or what it is after timeout_ms).
int readable_bytes(int fd, int want, int timeout_ms = kWaitMs);

// ------------------------------------------------------------------ the family
enum class Family { unix_, tcp4, tcp6, netns };
const char *family_name(Family f);
bool family_from(const std::string &s, Family *f);

struct Addr {
    sockaddr_storage ss{};
    socklen_t len = 0;
    const sockaddr *sa() const { return reinterpret_cast<const sockaddr *>(&ss); }
};

struct Run {
    std::string scenario;
    Family family = Family::unix_;
    bool expect_vipl = false; // the run is preloaded and checks what rides vipl
    std::string dir;          // this run's temporary directory
    std::string exe;          // this program
    // The netns family: the server's and the client's namespace files and addresses.
    std::string ns_path[2], ip[2];
    bool tcp() const { return family != Family::unix_; }
    int domain() const;
};
Run &run();

// A listening socket of the run's family, made in the server's place (its namespace),
// bound to a fresh address (a socket file in the run's directory, or port 0), listening
// with a backlog of 16; *where: where clients connect.  Fatal on failure.
int make_listener(Addr *where, int sock_flags = 0);
// A socket bound to a fresh address that does not listen: connecting to it is refused.
int make_unlistened(Addr *where);
// socket(run's domain, SOCK_STREAM | flags); fatal on failure unless may_fail.
int stream_socket(int flags = 0, bool may_fail = false);
// TCP_NODELAY on a TCP connection (as PostgreSQL and libpq set it); nothing on unix.
void no_delay(int fd);
// A blocking connect to where (fatal on failure), TCP_NODELAY set.
int dial(const Addr &where, int sock_flags = 0);
// Waits for a connection on lfd and accepts it (fatal after kWaitMs), TCP_NODELAY set.
int accept_one(int lfd, int flags = 0);
// In a process that serves connections: enter the server's place (the netns family's
// server namespace; nothing otherwise).  Call it first thing in a server process.
void enter_server_side();
// Where a peer's listener is: where_text names it as one of ours.
void note_listener(const Addr &a);
// An address as text for a Chan line, and back.
std::string addr_hex(const Addr &a);
Addr addr_from_hex(const std::string &s);
// The netns family: learns both namespaces ("<server ns file>,<server ip>,<client ns
// file>,<client ip>"), and unless !enter, opens them and enters the client's (the main
// process's place).
void netns_enter_client(const std::string &spec, bool enter = true);
// An address as a transcript shows it: "listener 1", "the server's address port
// listener 1", "client address, another port", "unnamed", ...
std::string where_text(const sockaddr *sa, socklen_t len);

// The connection on fd rides vipl in a preloaded run (the provider the family implies:
// shm on one host, tcp across namespaces) and is not interposed in a plain one.  Results
// go to stderr, not to the transcript; a failure fails the run.
void expect_carried(int fd, const char *what);

// ------------------------------------------------------------------ processes
// Lines both ways between a process and one peer (a socketpair the interposer never
// tracks; sends never raise SIGPIPE).
class Chan {
public:
    Chan() = default;
    explicit Chan(int fd) : fd_(fd) {}
    Chan(Chan &&o) noexcept;
    Chan &operator=(Chan &&o) noexcept;
    Chan(const Chan &) = delete;
    ~Chan();
    void tell(const std::string &line);
    // The next line; fatal after timeout_ms or at the end (the peer died).
    std::string hear(int timeout_ms = kWaitMs);
    bool hear_maybe(std::string *line, int timeout_ms);
    int fd() const { return fd_; }
    void close_now();

private:
    int fd_ = -1;
    std::string buf_;
};

struct Peer {
    pid_t pid = -1;
    std::string role;
    std::string log_path;
    Chan chan;
    bool joined = false;
    // Sends a command and returns its answer line.
    std::string ask(const std::string &cmd, int timeout_ms = kWaitMs);
    // Sends a command without waiting: its answer is read later by answer(), in order.
    // (A client waits on its socket, not on the Chan, for what its server does with the
    // bytes it just sent, as a real client does.)
    void post(const std::string &cmd) { chan.tell(cmd); }
    std::string answer(int timeout_ms = kWaitMs);
};

// Forks a peer running body(chan to the parent); it exits with 0 unless a check failed.
// The child dies with its parent (PR_SET_PDEATHSIG).
Peer *spawn(const std::string &role, const std::function<void(Chan &)> &body);
// Waits up to timeout_ms for the peer to end (killing it then), copies its transcript
// lines into ours ("<role>: ..."; its failures count as ours), then says "<role>:
// <status>"; returns the status.
int join(Peer *p, int timeout_ms = kWaitMs);
// join, and a check that the peer exited with 0.
void join_ok(Peer *p, int timeout_ms = kWaitMs);
// The role of a pid this process knows ("main", a peer's role), else "another process".
std::string role_of(pid_t pid);
// In a peer: its own role.
const std::string &self_role();
// Kills and reaps every peer not joined yet (the end of a run, or fatal).
void kill_peers();
// The main process of a run registers itself (its pid is "main" to role_of).
void register_main();
// A process that is no fork of the run (the exec scenario's new image) writes its
// transcript to out_fd, as `role`.
void become(const std::string &role, int out_fd);

// A first round trip on a new connection (fd in this process, the server peer's
// connection in use): 16 pattern bytes each way, which decides a preloaded connection;
// then expect_carried on both ends.  Says "<what>: first round trip ok".
void first_round_trip(int fd, Peer *server, const char *what);
// A later round trip on fd: 100 pattern bytes (seed) to the server, 100 (seed + 1) back;
// "ok", or the three results joined by "; ".
std::string round_trip(int fd, Peer *server, uint32_t seed);
// Reads n bytes and compares them with pattern seed: "n B, pattern ok", "n B, pattern
// broken", "m of n B, then EOF" (or the errno name).
std::string recv_check(int fd, size_t n, uint32_t seed);

// The peer that plays a server: enters the server side, and obeys the commands of
// peer.cc on the connections it accepts from lfd (see the list there).
Peer *spawn_server(const std::string &role, int lfd);

// The opening of a scenario with one connection: a listener whose server peer ("server")
// takes it over, a connection dialed to it (sock_flags for socket()), accepted, and its
// first round trip; addr, when given, gets the listener's address.
struct Served {
    Peer *srv;
    int fd;
};
Served serve_one(int sock_flags = 0, Addr *addr = nullptr);

} // namespace sockdiff
