// A socket-like byte stream over one VI (reliable delivery), on libvipl's public API.
//
// Data moves only inside the calls of this class (libvipl has no hidden thread): a
// program that waits on fd() must call read() (or progress()) when it wakes, and data
// accepted by write() but held back by flow control leaves when the program next calls
// the stream.
//
// Errors: every call reports through a std::error_code& (cleared on success); nothing
// is thrown.  Conditions (std::errc, generic category):
//   operation_would_block  non-blocking mode and nothing could be moved
//   timed_out              the deadline passed first
//   interrupted            a signal handler ran while the call slept; nothing was lost
//                          (a handler that runs during the short spin before sleeping,
//                          StreamOptions::spin_us, does not end the call)
//   connection_reset       the peer aborted, died or the link broke
//   broken_pipe            write after shutdown_write(), or after the peer closed fully
//   not_connected          the stream is empty (moved from, closed or never connected)
//   connection_refused     nobody listens on the URI (or it refused)
//   invalid_argument       a bad URI or option
// Other libvipl failures come as vipl_category() codes (see vipl/error.h).
//
// Threads: a private Stream (the default) is used by one thread at a time (a program
// that shares one between threads serialises the calls); distinct Streams are
// independent.  A shareable Stream (StreamOptions::shareable) may be called by several
// threads at once, except close(), abort(), the destructor and moving, which need the
// other threads of the process out of its calls (as closing a socket's fd would).  fd()
// may be polled from any thread; the first call of fd() itself is a call of the stream.
// Signals: no call is async-signal-safe.  Blocking calls return interrupted when a
// handler runs while they sleep, whatever SA_RESTART says.
// fork():
//  - A child inherits no usable private Stream (libvipl gives the child no VI); it must
//    neither use nor destroy the parent's private Streams (leave with _exit), and may
//    connect anew.
//  - A shareable Stream is held by the process that made it and by every child it forks
//    afterwards (and theirs): all may use it at once, like a socket inherited across
//    fork: parent writing while the child reads, both writing (a blocking write that
//    fits the send buffers stays contiguous), both reading (each byte goes to one
//    reader).  fd() is the same descriptor in every holder.  close() (or the destructor,
//    or assigning over it) in a holder while other holders live ends only that process's
//    copy: no end of stream, nothing the peer or the others notice.  The last holder's
//    close() is the orderly close.  Holders that died (killed, or exited without
//    closing) do not count.  abort() in any holder resets the connection for all.  A
//    holder killed while inside a call may leave the shared state half-changed: the
//    stream then breaks with connection_reset for every holder (never a hang).
//  - A child may destroy an inherited Listener (it has no effect on the parent's);
//    accepting is the parent's.
//  - Nonblocking mode is each holder's own; set_fd_events() is one for all holders.
#pragma once

#include "vipl/address.h"
#include "vipl/deadline.h"
#include "vipl/spin.h"
#include "vipl/uri.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <system_error>

namespace vipl {

struct StreamOptions {
    // Receive side: this many receive buffers of buffer_size payload bytes each are
    // posted; the peer may have that many data messages in flight (its credits).  The
    // connecting side's buffer_size (at most 16 MiB) wins: the accepting side adopts it
    // (VIPL requires equal MaxTransferSize on both VIs); recv_buffers is each side's own.
    uint32_t recv_buffers = 16;
    uint32_t buffer_size = 64 * 1024;
    // Send side: this many registered send buffers (of buffer_size) hold written data
    // until the peer has it.  Small writes are coalesced into the last buffer not yet sent.
    uint32_t send_buffers = 16;
    // A blocking write without deadline of at least this many bytes is not copied: the
    // peer reads it from the caller's memory (RDMA read), straight into its program's
    // buffer when that is a blocking read without deadline; 0 never does.  Such a write
    // returns once the peer has taken every byte (see write()).  Where the stage is used
    // (stage_threshold), a write that would sleep, to a peer waiting on another CPU,
    // stages its last quarter, up to 256 KiB, while the peer reads the rest, and returns
    // once the peer took that rest: the peer's next read finds the next write offered (a
    // blocking 1 MiB stream on shm moved 1.3-1.4x more).  Measured on shm zero copy pays
    // from about 256 KiB; on tcp it does not (common/README.md).  A shareable stream
    // never writes zero copy (0 in its options()), and asks its peer for none: it reads
    // what a peer writes through its own receive buffers.
    uint32_t zcopy_threshold = 1024 * 1024;
    // A copied write (any write zero copy does not take) with at least this many bytes
    // left is copied into a registered stage of two 512 KiB parts that the peer
    // RDMA-reads, straight into its program's buffer when that is a blocking read without
    // deadline: the reader copies each byte once, not twice (out of the VI's transfer,
    // then out of its receive buffer).  Measured on shm it pays from 64 KiB (bandwidth
    // and blocking round trips gain, spinning ones are level; at 32 KiB both lose).  The
    // write returns once the bytes are staged, as any copied write; close() waits until
    // the peer took the staged parts, as it waits for bytes held back by credits.
    // Blocking writes of a private stream only, to a peer that reads our memory with no
    // call of ours (shm: VIP_VI_ENDPOINTS::PeerReadsAlone); the stage (1 MiB) is made at
    // the first such write.  0: never.
    uint32_t stage_threshold = 64 * 1024;
    // A write with nothing queued before it and a credit at hand goes out as inline sends
    // where the transport takes them (VipPostSendInline; shm does, up to its copy
    // threshold): libvipl copies the bytes from the caller's buffer straight into the
    // transport, with no send buffer, no descriptor and no completion to take.  Ordered
    // with every other message; false: every write goes through the send buffers.
    bool inline_sends = true;
    // Non-blocking mode: read/write return operation_would_block instead of waiting.
    bool nonblocking = false;
    // How long the destructor lets close() wait for the peer to take everything written.
    std::chrono::milliseconds linger{5000};
    // Base budget, in microseconds, of the spin a blocking call makes before it sleeps in
    // the kernel (0: no spinning).  libvipl's adaptive policy spends it (vipl/spin.h):
    // less while spinning does not pay, none while the peer waits on this CPU.
    uint32_t spin_us = 20;
    // Shareable: the stream (made by connect(), or accepted by a Listener with this set)
    // is shared with the children the process forks afterwards, and may be used by
    // several threads at once (see the fork and thread rules above).  Its state lives in
    // shared memory behind a process-shared lock: calls cost a little more.
    bool shareable = false;
    // fd() is an epoll fd made readable by the stream's own readiness (set_fd_events():
    // two more system calls whenever readiness changes).  false: fd() is libvipl's VI
    // wait fd itself and the stream keeps no eventfd: no system call on the data path,
    // and readiness is the caller's business through events() (see fd()).
    bool ready_fd = true;
    // Whether write() may take bytes that wait for the peer's credits (coalesced, sent by a
    // later call as credits come).  false: write() takes only what it can send at once, so
    // every byte it accepted is on its way without another call of this stream, as a
    // socket's are once send() returned (a writer then gets operation_would_block, or
    // waits, while the peer has no room).  The socket interposer wants that.
    bool hold_back = true;
    // Whether write() first takes what arrived (on tcp a recv() that usually finds
    // nothing), which tells it at once that the peer closed: a unix socket's send() then
    // fails with EPIPE.  false: a write that can go out at once looks at nothing first, as
    // a TCP connection's send() after the peer closed still succeeds (the error comes at
    // a later call).  A private stream's write within about a microsecond of a look that
    // took an arrival (a reply to what a read just returned) counts that look as its own:
    // what arrived since, or was left behind it, waits for the next call.
    bool write_looks = true;
    // Overrides the VIPL device chosen from the URI ("tcp:eth0", "shm0"...); empty: from URI.
    std::string device;
};

// Per-connection counters since the stream was made.
struct StreamCounters {
    uint64_t bytes_in = 0;      // payload bytes received (taken off the VI)
    uint64_t bytes_out = 0;     // payload bytes handed to the VI
    uint64_t bytes_zcopy = 0;   // of bytes_out, sent from the caller's memory (zero copy)
    uint64_t bytes_staged = 0;  // of bytes_out, RDMA-read by the peer from the stage
    uint64_t bytes_inline = 0;  // of bytes_out, copied by libvipl from the caller's memory
    uint64_t messages_in = 0;   // data messages received
    uint64_t messages_out = 0;  // data messages sent
    uint64_t control_in = 0;    // credit / fin / fin-ack messages received
    uint64_t control_out = 0;   // and sent
    uint64_t credit_stalls = 0; // a write had data to send and no credit from the peer
    uint64_t would_block = 0;   // calls that returned operation_would_block
    uint64_t spin_wins = 0;     // blocking calls satisfied while polling (no sleep)
    uint64_t sleeps = 0;        // times a blocking call slept in the kernel
    uint64_t doorbells = 0;     // system calls libvipl made on this VI to wake a waiter
    uint64_t joined_in = 0;     // of messages_in, copied behind an unread one (a lagging
                                // reader holds bytes, not a buffer per message)
};

class Listener;

class Stream {
public:
    Stream() noexcept;
    Stream(Stream &&) noexcept;
    Stream &operator=(Stream &&) noexcept; // closes what *this held (as the destructor)
    Stream(const Stream &) = delete;
    Stream &operator=(const Stream &) = delete;
    // Orderly close bounded by options.linger (see close()).
    ~Stream();

    // Connects to a Listener bound to `uri` (its port or service name) and waits until the
    // connection is made or the deadline passes.  Errors: connection_refused (nobody
    // listens), timed_out, interrupted, host_unreachable, invalid_argument (bad options,
    // port 0 without a service), vipl codes.
    static Stream connect(const Uri &uri, Deadline deadline, std::error_code &ec,
                          const StreamOptions &options = {});
    // The same from text (parse errors: invalid_argument).
    static Stream connect(std::string_view uri, Deadline deadline, std::error_code &ec,
                          const StreamOptions &options = {});

    // True while the stream holds a connection (even a broken one, until closed).
    bool is_open() const noexcept;
    explicit operator bool() const noexcept { return is_open(); }

    // Reads up to buf.size() bytes; returns how many (at least 1), or 0 at the orderly end
    // of the stream (the peer shut down writing and everything before was read) or when
    // buf is empty.  Blocking mode waits until something is readable or the deadline
    // passes; non-blocking mode returns operation_would_block at once.  After an abort by
    // the peer, data already received may still be returned, then connection_reset.
    // A blocking read without deadline takes the bytes of a zero-copy write straight into
    // buf; a signal does not end it while such a transfer is under way.
    std::size_t read(std::span<std::byte> buf, std::error_code &ec);
    std::size_t read(std::span<std::byte> buf, Deadline deadline, std::error_code &ec);

    // Like read() (MSG_PEEK): copies up to buf.size() bytes of what a read() would return
    // into buf, but they stay in the stream for the next read() or peek().  Blocks,
    // returns 0 at the end of the stream and reports errors as read() does.  A peek never
    // reads a zero-copy region (or a staged part: stage_threshold) straight into buf: its
    // bytes come through a receive buffer, up to 64 KiB (buffer_size) of such a region
    // at a time.
    std::size_t peek(std::span<std::byte> buf, std::error_code &ec);
    std::size_t peek(std::span<std::byte> buf, Deadline deadline, std::error_code &ec);
    // How many bytes a read() with a large enough buffer would return now without
    // waiting (FIONREAD), after taking what arrived; 0 for an empty stream.  Never blocks.
    // Of a region (zero copy, a staged part) only what a receive buffer holds counts: a
    // reader that waits for this to reach a large write's size before it reads waits
    // for ever (common/README.md, Pitfalls).
    std::size_t readable_bytes() noexcept;

    // Writes bytes; returns how many were accepted (copied into registered send buffers,
    // sent as credits allow).  Blocking mode waits until every byte is accepted; if the
    // deadline passes or a signal interrupts it after some bytes were accepted, it
    // returns that count with ec clear (like a socket).  Non-blocking mode accepts what
    // fits and returns operation_would_block when nothing fits.
    // Shareable: a blocking write of at most send_buffers * buffer_size bytes waits until
    // all of it fits and is copied at once, so it stays contiguous however many holders
    // write (it returns 0 and timed_out or interrupted rather than a part); larger ones
    // and non-blocking ones go in parts like a socket's, each part contiguous.  A write
    // waiting when another holder shuts writing down returns broken_pipe.
    // Zero copy (blocking, no deadline, options().zcopy_threshold bytes or more): buf is
    // offered to the peer in regions it reads itself, and the call returns when it has
    // taken them all: when its program has read them, or its library took them in
    // because its program was itself blocked writing.  A signal stops further offers;
    // the call waits for the offered ones and returns their count (interrupted if none).
    // buf must not change during the call.
    std::size_t write(std::span<const std::byte> buf, std::error_code &ec);
    std::size_t write(std::span<const std::byte> buf, Deadline deadline, std::error_code &ec);

    // Moves data without reading or writing: takes completions, returns credits, sends
    // data held back by flow control.  Never blocks.
    void progress(std::error_code &ec);
    // Whether data accepted by write() still waits for flow control (a later call,
    // progress() for one, sends it as credits come).
    bool holds_back() const noexcept;

    // Half-close: no more writes (broken_pipe); once everything written before has been
    // sent, the peer reads end of stream, and may keep writing to us.  Never blocks.
    void shutdown_write(std::error_code &ec);
    // No more reads: what is here and what comes is dropped (read() gives the end of
    // stream), and the peer's writes fail with broken_pipe from then on, as a unix
    // socket's do after shutdown(SHUT_RD).  Never blocks.
    void shutdown_read(std::error_code &ec);

    // Orderly close: stops reading (unread and later data is discarded), sends what was
    // written, sends the end of stream and waits until the peer has taken all of it, or
    // the deadline passes (timed_out: data may be lost) or the connection broke (the
    // error; none if the peer had finished too).  Signals do not end the wait.  The
    // stream is empty afterwards in every case.
    // Shareable, while other holders live: ends only this process's copy at once
    // (nothing is sent, unread data stays for the others), and returns no error.
    std::error_code close(Deadline deadline);
    // Drops the connection at once; the peer gets connection_reset (so do the other
    // holders of a shareable stream).  Never blocks long.
    void abort() noexcept;

    // Shareable: whether live processes other than this one hold the stream (a close()
    // here would end only this copy).  false for a private or empty stream.  Costs a
    // few system calls per other holder.
    bool shared_with_others() const noexcept;

    // The orderly close in two steps, for a program that must not wait for the peer (a
    // socket's close returns at once; the kernel finishes for it): finish() stops reading
    // (unread and later data is discarded), sends what was written and the end of
    // stream, and returns at once; finished() then says, without waiting, whether the
    // peer has taken all of it or the connection is over (close() with any deadline then
    // returns at once).  Each call of finished() makes progress.  Shareable: as close()
    // (ask shared_with_others() first: with other holders, close() alone).
    void finish() noexcept;
    bool finished() noexcept;

    // Waits until everything written so far was handed to the transport (nothing held
    // back, every send complete: in the shm ring, in the tcp socket), so that it reaches
    // the peer without another call of this stream; or until the deadline (timed_out),
    // a signal handler (interrupted) or the connection's end (its error).  A socket's
    // blocking send returns then: the interposer's does too.
    std::error_code flush(Deadline deadline) noexcept;

    // Whether data this side wrote was not yet read by the peer's program (its buffers
    // not returned).  A socket whose peer closed or died in that case reports a reset
    // (ECONNRESET) rather than the end of stream: the interposer asks this.
    bool peer_unread() const noexcept;
    // Whether the peer closed the stream (close() or finish()) rather than only shutting
    // down writing: both end the stream for the reader; a unix socket hangs up on the
    // first only.
    bool peer_closed() const noexcept;
    // A half-close that says the rest of this side's bytes go another way (the socket
    // interposer hands a connection back to its kernel socket before an exec): as
    // shutdown_write(), and the peer's peer_switched() becomes true once it has read
    // everything before it (read() gives the end of stream).
    void switch_out(std::error_code &ec);
    bool peer_switched() const noexcept;
    // Either side switched out (a shareable stream's other holder may have done it here).
    bool switching() const noexcept;

    // A file descriptor that poll/select/epoll report readable (POLLIN) when one of the
    // events chosen by set_fd_events() holds (by default POLLIN: read() would not block,
    // as data, end of stream or an error is there), or the connection broke.  Spurious
    // readiness is possible (any VI event); a missed wake-up is not, provided the program
    // calls the stream (read(), write(), events() or progress()) after each wake-up.
    // It is an epoll fd, so it never reports POLLOUT itself (the kernel reports only
    // POLLIN for an epoll fd): to wait until write() accepts a byte, add POLLOUT with
    // set_fd_events() and poll this fd for POLLIN, then ask events().  The fd belongs to
    // the stream: never close or read it.  -1 for an empty stream.
    // Without ready_fd (StreamOptions): fd() is libvipl's VI wait fd, readable (POLLIN)
    // on any event of the VI (a message, a send completing, the connection ending) that
    // comes after a call of the stream left nothing of set_fd_events() ready (the call
    // then arms it).  It does not tell the stream's readiness: call events() (or the
    // read() or write() you wanted) after every wake-up and before every sleep, and sleep
    // only when it reported nothing of what you wait for (data already taken off the VI
    // makes no new event).  Waiting for POLLOUT works the same way (credits arrive as VI
    // events; ask set_fd_events(POLLOUT)).  A shareable stream that several holders
    // wait on at once needs ready_fd: another holder may take the event this one would
    // have woken for.
    // Either way the stream keeps fd() truthful only from the first call of fd() on
    // (in this process): until then no call arms anything for it.
    int fd() const noexcept;

    // For a waiter that looks at the stream itself before it sleeps (the socket
    // interposer): libvipl's VI wait fd, which stays quiet until arm() armed it (unlike
    // fd(), whose handing out makes the stream arm it after every call, a system call per
    // message for the peer).  arm() takes what arrived and returns events(); when none of
    // `want` (nor POLLERR, POLLHUP) holds, it arms the wait fd first, so that the VI's
    // next event makes it readable: sleep on wait_fd() only after an arm() that returned
    // nothing wanted.  Without ready_fd only; -1 for an empty stream.  `looked`: the
    // caller called events() just before, so arm() takes nothing first (on tcp that
    // would be a second recv() finding nothing): what came since makes the wait fd
    // readable at once all the same.  `any_event`: armed for every event of the VI, the
    // peer taking what this side sent included, as a wait for write room needs, even
    // when `want` is POLLIN (another waiter on the same fd waits for room); otherwise a
    // wait for POLLIN alone, with nothing of ours in flight, hears of arrivals only (the
    // peer then rings for what it sends, not for what it takes).  `edge`: the caller
    // watches wait_fd() edge-triggered only (EPOLLET), so the arming reads nothing
    // (VIP_ARM_EDGE: a system call less per sleep); the fd may stay readable after, so
    // a level-triggered poll of it must follow an arm() without `edge`.
    int wait_fd() const noexcept;
    short arm(short want, bool looked = false, bool any_event = false, bool edge = false) noexcept;
    // arm() for a waiter that only asks whether to sleep: true when it armed the wait fd
    // (none of `want`, POLLERR, POLLHUP holds: sleep on wait_fd() now), false when the
    // stream is ready for `want` or broke (look again instead of sleeping), and for an
    // empty stream (the next call fails at once).
    bool arm_to_sleep(short want, bool looked = false, bool any_event = false) noexcept;
    // For a waiter on this stream alone, in place of arm() and a poll of wait_fd() (the
    // socket interposer's poll of one socket): the events that hold, as arm() returns
    // them, when one of `want`, POLLERR, POLLHUP does; otherwise 0 after a sleep until
    // the VI's next event or the deadline, in libvipl's own (VipWaitViEvent:
    // edge-triggered, a system call less per wake-up than a poll of the wait fd, which
    // it leaves unarmed).  After a 0, look again: a wake-up may be spurious.  ec:
    // interrupted when a signal handler ran, timed_out at the deadline.  Like arm(), it
    // takes nothing first (call events() before), and counts no sleep (the caller does).
    short sleep_for(short want, Deadline deadline, std::error_code &ec) noexcept;

    // Which readiness makes fd() readable: POLLIN, POLLOUT or both (other bits are
    // ignored; POLLERR and POLLHUP always do).  Takes effect at once.  Default POLLIN.
    // A program that waits for POLLOUT only when a write would block keeps fd() quiet
    // while the stream is writable (like asking a socket for POLLOUT only then).
    // Without ready_fd it says when a call arms fd() (see fd()).  Shareable: one for all
    // holders.
    void set_fd_events(short events) noexcept;
    short fd_events() const noexcept;

    // The readiness now, as poll() bits, after taking what arrived (never blocks):
    // POLLIN     read() would not block (data, end of stream, or an error to report)
    // POLLOUT    write() would accept at least one byte, or fail at once
    // POLLRDHUP  the peer shut down writing (end of stream reached or queued)
    // POLLHUP    both directions are shut, or the connection broke
    // POLLERR    the connection broke (the next read or write says why)
    // 0 for an empty stream.
    short events() noexcept;
    // A waiter's first look, when it arms before it sleeps (arm(), arm_to_sleep()): as
    // events(), except that a read that would have blocked a few microseconds ago at most
    // (an event loop's EAGAIN just before its poll) stands for the look at the VI, a
    // library call less per wait.  What came since makes the armed fd readable at once.  Once per
    // such read: the next call looks.
    short events_before_arming() noexcept;

    // This holder's mode (a shareable stream's other holders keep theirs).
    void set_nonblocking(bool on) noexcept;
    bool nonblocking() const noexcept;

    // For a program that waits on several streams itself and spins before it sleeps
    // (vipl/spin.h): the spin this stream's policy allows now (libvipl's VipViSpinBudget
    // with options().spin_us as the base; none for an empty stream or spin_us 0), and
    // how that spin ended for this stream (VipViSpinOutcome; see Spin::report).  Any
    // thread, at any time; this process's policy state.
    SpinBudget spin_budget() const noexcept;
    void spin_outcome(bool won) noexcept;

    // Counters of all holders together (shareable).
    StreamCounters counters() const noexcept;
    // The same without the VI's own (doorbells reads 0): no library call, for a caller
    // that reads them at every sleep (the interposer's connection table).
    StreamCounters stream_counters() const noexcept;
    // The options in effect (buffer_size as negotiated; nonblocking as made: see
    // nonblocking(); zcopy_threshold and stage_threshold 0 when shareable).
    const StreamOptions &options() const noexcept;

    // This end and the peer's end of the connection, as the kernel reported them when
    // the connection was made (vipl/address.h): on tcp the socket's own addresses, on
    // shm the processes' credentials; never what the peer claims.  They stay the same
    // after the connection breaks.  An empty Address for an empty stream.
    const Address &local_address() const noexcept;
    const Address &peer_address() const noexcept;

    struct Impl;

private:
    friend class Listener;
    explicit Stream(std::unique_ptr<Impl> impl) noexcept;
    std::unique_ptr<Impl> impl_;
};

// A bound endpoint that accepts Streams.
//
// Threads: one thread at a time (fd() may be polled from any).  Signals: accept() returns
// interrupted when a handler runs while it sleeps.  fork(): the Listener stays the
// parent's; a child may destroy its copy (no effect on the parent's) but not accept, and
// holds no part of fd().  Streams it accepts are shareable when its options say so.
//
// A program with its own event loop polls fd() with its other descriptors and calls
// accept(Deadline{}) when it is readable; no thread is needed, and none is started.
class Listener {
public:
    Listener() noexcept;
    Listener(Listener &&) noexcept;
    Listener &operator=(Listener &&) noexcept;
    Listener(const Listener &) = delete;
    Listener &operator=(const Listener &) = delete;
    ~Listener(); // pending connection requests are rejected

    // Opens the provider's device and starts taking connection requests for the URI's
    // discriminator, its port or service name (requests made from now on are queued
    // until accept()).  Port 0 without a service picks a free port at random in
    // 20000..60999 (trying again, a bounded number of times, while the port is in use);
    // uri() then has it.  `options` are those of the accepted streams.  Errors:
    // invalid_argument, address_in_use (the discriminator is served by another process,
    // or its TCP port is taken), vipl codes.
    static Listener bind(const Uri &uri, std::error_code &ec, const StreamOptions &options = {});
    static Listener bind(std::string_view uri, std::error_code &ec,
                         const StreamOptions &options = {});

    bool is_open() const noexcept;
    // The URI bound, with the port chosen when it was 0.
    const Uri &uri() const noexcept;
    // Where it listens (vipl/address.h): on tcp the NIC's IP address and the port, on shm
    // this host, the port or service and this process.  Empty for an empty listener.
    const Address &local_address() const noexcept;

    // A file descriptor that poll/select/epoll report readable (POLLIN) when accept()
    // would not block: a connection request is pending.  Spurious readiness is possible
    // (a request still on its way, one meant for another listener sharing the tcp port),
    // a missed one is not: an accept() that returned timed_out re-arms it.  Owned by the
    // listener (never close or read it); -1 for an empty listener.
    int fd() const noexcept;

    // Accepts the next connection request, waiting until the deadline.  Deadline{} (or
    // any past deadline) never sleeps: it takes a request that is there, or returns
    // timed_out; accepting it still waits (at most CONNECT_ACK_MS) for the requester's
    // last handshake message, which a live requester sends at once.  Errors: timed_out,
    // interrupted, not_connected (empty listener), vipl codes.  A request whose buffer
    // size this side cannot serve is rejected and accept() goes on waiting.
    Stream accept(Deadline deadline, std::error_code &ec);

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

} // namespace vipl
