// The state of one stream: its VI, registered buffers, credits and queues.
//
// Memory (one mapping): the State below with its queues, then (registered) the
// descriptors (receive, data send, control send, RDMA read), the receive buffers (mtu
// bytes each), the data send buffers (mtu) and the control send buffers (64 bytes).
// Receive descriptors are posted FIFO and any message may land in any of them, so every
// receive buffer holds a whole message.  A private stream maps it MAP_PRIVATE; a
// shareable one MAP_SHARED, registers it Shareable and creates a shareable VI, so that
// the children it forks afterwards hold the same stream (stream_share.cc).
//
// Flow control: the peer may have at most `recv_data` data messages unreturned (its
// credits, granted by a first credit message).  Control messages need no credit: a
// credit message is sent only when at least `batch` (= ceil(recv_data / 4)) credits are
// owed, so at most 4 are ever unprocessed at the peer, plus one fin, one fin-ack and
// kRtsMax rts-dones: kCtlSlots extra receive buffers cover them, and the peer never
// finds no receive posted.  A private stream gives a read buffer back to the VI when it
// next waits, or before the credit for it leaves (repost_owed): a credit never names a
// buffer the VI does not hold, and the reply to a message goes out without a post first.
//
// Zero copy (rendezvous, private streams only): a blocking write of at least
// zcopy_threshold bytes registers the caller's memory for RDMA read and sends rts
// messages instead of data, each offering a region of at most kRegionMax bytes, at most
// kRtsMax at a time; an rts takes a slot and a credit and queues behind buffered data
// like a data message.  The reader takes a region with RDMA reads: straight into the
// program's buffer when a blocking read without deadline has room (the only copy),
// otherwise one piece at a time into the rts's own receive buffer (the "bounce", started
// as soon as the rts is first in line, so non-blocking readers see readiness).
// Finishing a region returns its credit with an rts-done; the write returns once every
// region it offered is done.  A side blocked in a write while regions are offered to it
// pulls them into heap memory (pull_regions), so two programs writing to each other
// before reading do not deadlock.  A shareable stream offers none and asks its peer for
// none (frame.h, kFlagNoRts): caller memory and heap pulls are one process's.
//
// Staged writes (private streams, stream_stage.cc): a blocking copied write with at least
// stage_threshold bytes left copies them into a part of the stage (kStageParts registered
// parts of kStagePart bytes, made at the first such write) and offers the part with an
// rts, as zero copy offers the caller's memory; the write returns once the bytes are
// copied, and the part is free again at its rts-done.  Staged and zero-copy rts share
// the kRtsMax limit; rts-dones name no region, so `offered` remembers, oldest first,
// which part each offered rts was (-1: the caller's memory).
//
// Locking: a private stream is used by one thread at a time and takes no lock.  A
// shareable stream's State is guarded by a process-shared robust mutex, taken by every
// public call (Guard) and never held while sleeping; a holder that died holding it
// breaks the stream for everyone (poisoned).  While one single-threaded process holds
// it, a store stands for the mutex (census.h, stream_share.cc).
#pragma once

#include "census.h"
#include "frame.h"
#include "nic.h"
#include "ring.h"
#include "vipl/spin.h"
#include "vipl/stream.h"

#include <poll.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <system_error>
#include <vector>

namespace vipl {

// A deadline as a VIPL timeout in milliseconds (VIP_INFINITE for kNever, 0 when past).
VIP_ULONG timeout_ms(Deadline deadline);

struct Stream::Impl {
    static constexpr uint32_t kCtlSlots =
        9; // see the header: credits, fin, fin-ack, rts-dones, stop
    static constexpr uint32_t kCtlBufSize = 64;
    static constexpr uint32_t kRtsMax = 2;             // regions offered at a time
    static constexpr uint32_t kRegionMax = 4u << 20;   // bytes per region
    static constexpr uint32_t kRdmaSlots = 16;         // RDMA read descriptors
    static constexpr size_t kDirectMin = 16 * 1024;    // room for a direct read
    static constexpr uint32_t kStageParts = kRtsMax;   // a part per region offered at once
    static constexpr uint32_t kZcopyTail = 256 * 1024; // staged tail of a zero-copy write
    static constexpr uint32_t kStagePart = 512 * 1024; // bytes per part: one RDMA read each
    static constexpr uint32_t kSleepSlots = 8;         // threads asleep at once (shareable)
    // The most buffers of either kind a stream has: a peer never grants more credits
    // than it has receive buffers, so a grant past this is a broken (or hostile) peer.
    static constexpr uint32_t kMaxBuffers = 1024;

    // A message taken off the VI, not yet read.
    struct Msg {
        uint32_t slot = 0, off = 0, end = 0; // bytes [off, end) of bytes() are unread
        bool rts = false;                    // a region to RDMA-read: the rest is its state
        bool done_sent = false;              // its rts-done is owed already (pulled)
        uint32_t taken = 0; // bytes of the region read (into off..end or a program)
        detail::Rts region{};
    };
    // Written bytes in a send buffer, not posted yet (no credit).
    struct Out {
        uint32_t slot, len;            // payload bytes (an rts: the region's)
        const std::byte *zc = nullptr; // an rts offering the caller's bytes from here
    };
    // A thread asleep in a shareable stream's wait, woken through its slot's eventfd by
    // a holder that changed the state (it may have taken the VI event the sleeper
    // waited for).
    struct Sleeper {
        int32_t pid = 0, tid = 0; // 0: free
    };

    // Everything the holders of a shareable stream share, at the start of its mapping.
    struct State {
        pthread_mutex_t mu;            // shareable streams only (robust, process-shared)
        detail::Census census;         // who holds it: one holder takes sole sections
        std::atomic<uint64_t> sole{0}; // the holder token of a sole section in progress
        bool poisoned = false;         // a holder died holding mu: queues may be half-changed
        uint64_t version = 0;          // bumped by every change a sleeping waiter may wait for
        uint32_t asleep = 0;           // bit i: sleeper[i] is taken
        Sleeper sleeper[kSleepSlots];

        // Receive side.
        detail::Ring<Msg> rq; // data taken off the VI, not yet read
        uint32_t owed = 0;    // credits to return to the peer
        bool fin_rx = false;
        bool peer_closed = false;   // the fin said the peer closed (kFlagClosed)
        bool peer_switched = false; // the fin said the peer goes on elsewhere (kFlagSwitch)
        bool switch_out = false;    // our fin says so
        bool fin_ack_rx = false;
        bool need_fin_ack = false;
        bool discarding = false; // closing: data is dropped as it arrives
        uint32_t need_rts_done = 0;
        uint32_t rdma_posted = 0; // RDMA reads in flight
        uint32_t bounce_len = 0;  // bytes of the bounce read in flight (0: none)

        // Send side.
        uint32_t credits = 0;               // data messages we may send
        uint32_t credits_max = 0;           // the most the peer ever granted at once
        detail::Stack<uint32_t> free_slots; // data send buffers
        detail::Stack<uint32_t> free_ctl;   // control send buffers
        detail::Ring<Out> pending;          // written, not posted yet (no credit)
        uint32_t rts_posted = 0;            // regions offered, not done
        bool heard = false;                 // a first message came from the peer
        bool peer_no_rts = false;           // the peer asked for no zero copy
        bool fin_wanted = false;
        bool fin_tx = false;
        bool stop_wanted = false; // shutdown_read(): a stop goes out (once)
        bool stop_tx = false;
        bool peer_stopped = false; // the peer reads no more: writes fail

        bool connected = false; // start() ran
        bool broken = false;
        std::error_code error; // why the connection broke
        StreamCounters stats;
        bool ev_set = false;      // the readiness eventfd is set
        short fd_events = POLLIN; // which of events() make it readable
        bool released = false;    // the last holder destroyed the VI (stream_share.cc)
    };

    // Allocates and registers memory, creates the VI with MaxTransferSize `transfer`
    // (its buffer size inside: detail::vi_transfer_size) and posts every receive.
    static std::unique_ptr<Impl> create(std::shared_ptr<detail::Nic> nic,
                                        const StreamOptions &options, uint64_t transfer,
                                        std::error_code &ec);
    ~Impl();

    // Called once the VI is connected: grants the peer its credits.
    void start();

    // --- locking (stream_share.cc; nothing for a private stream)
    void lock() {
        if (shared) lock_shared();
    }
    void unlock() {
        if (shared) unlock_shared();
    }
    struct Guard {
        Impl &s;
        explicit Guard(Impl &i) : s(i) { s.lock(); }
        ~Guard() { s.unlock(); }
        Guard(const Guard &) = delete;
        Guard &operator=(const Guard &) = delete;
    };
    void lock_shared();
    void unlock_shared();
    // A sole section (census.h): the mark first, then the look, so that a fork from a
    // signal handler between the two leaves the child a mark to wait out.
    bool enter_sole();
    // With the mutex held: waits out a sole section begun before a fork or a thread.
    void wait_sole_end();
    // A holder died with the lock held: the stream breaks for every holder.
    void poison();
    // Marks a change a sleeping waiter may wait for (unlock wakes the sleepers).
    void changed() {
        if (shared) st->version++;
    }
    // Sleeps on the VI's wait fd (and, shareable, on a sleeper slot's eventfd) until
    // something may have changed, the deadline passes or a signal arrives (lock held on
    // entry and exit; released while asleep).  false: interrupted.
    bool sleep(Deadline deadline, bool to_read = false);
    // What the VI's wait fd is armed for (VipArmViWaitFdEx) by a waiter that waits to
    // read or not: arrivals only while this side waits for nothing of its own to leave
    // (no bytes held back, no region being pulled), so that the peer taking our request
    // rings no doorbell before it answers.  Lock held.
    VIP_ULONG arm_events(bool to_read) const;
    // Wakes the sleepers of other threads and processes (lock held).
    void wake_sleepers();

    // Who looks at the VI, and so what a look takes (progress):
    //   all   every completion (the default);
    //   wait  a waiter's look: it stops after the first arrival that brings stream bytes,
    //         so the wait it ends goes on at once; what is behind it is taken at the next
    //         look, as if it had come just after this one.  Taking the last arrival costs
    //         one more library call (on tcp a recv() that finds nothing) on the way to
    //         the reply;
    //   read  a reader's wait: moreover leaves send completions in the VI until
    //         sends_wanted().  A completed send only gives back a buffer, which a reader
    //         does not wait for, and taking it is one more library call per look (on shm
    //         one that reads the line the peer writes as it consumes).  Every other call
    //         takes them, and so does any arming: one left in the VI would make the
    //         armed fd fire at once;
    //   drain a reader's first look, before it waits: every arrival (a reader that keeps
    //         up with a stream of messages finds several, and reads on without a look),
    //         send completions as `read`.
    enum class Look { all, wait, read, drain };
    // Takes what `look` takes, then posts what flow control allows.  Never blocks.
    bool progress(Look look = Look::all); // whether a completion came (the peer is at work)
    // A reader's look takes send completions too: half of a kind of buffer is out, or an
    // RDMA read (a send completion too) is in flight.
    bool sends_wanted() const {
        const State &t = *st;
        return t.rdma_posted > 0 || 2 * t.free_slots.size() <= nsend ||
               2 * t.free_ctl.size() <= kCtlSlots;
    }
    bool reap_sends(); // takes every send completion; whether one came
    // Before arming the wait fd for `what`: takes the send completions it would hear of
    // at once (a reader's looks leave them in the VI); whether one came.
    bool reap_for_arming(VIP_ULONG what) { return what != VIP_ARM_ARRIVALS && reap_sends(); }
    // Makes progress until done() holds (the predicate must also accept `broken`):
    // spins as the VI's spin policy allows (spin_us is its base), then sleeps.  Errors:
    // would_block (at once in non-blocking mode), timed_out, interrupted.  Lock held.
    // to_read: the caller waits for the peer's data only (see arm_events).
    template <class Done>
    std::error_code wait_until(Done &&done, Deadline deadline, bool to_read = false);
    // What the VI's spin policy allows a waiter now, and how a spin ended (libvipl's
    // policy, vipl/spin.h).  In a process with one thread, while spins keep winning, the
    // policy is asked at most every kBudgetReuseTicks and wins after a win are not told: in
    // a steady exchange neither changes anything, and each is a library call per message.
    // The time is the TSC's (ticks()), not the clock's: a clock read costs as much as the
    // question it would save.
    SpinBudget spin_budget() const;
    void spin_outcome(bool won);
    static constexpr uint64_t kBudgetReuseTicks = uint64_t{1} << 19; // 130-260 us at 2-4 GHz
    // Sets or clears the readiness eventfd behind fd() to match the state.
    void update_ready();
    bool readable() const {
        return front_ready(false) || (st->rq.empty() && st->fin_rx) || st->broken;
    }
    // The first message can give bytes now (or be finished); `direct`: a blocking read
    // may RDMA-read an rts region itself.
    bool front_ready(bool direct) const;
    // Free room in send buffers: what a write could take now without waiting.
    size_t room() const;
    // write() would accept a byte, or fail at once.
    bool writable() const {
        if (st->broken || st->fin_wanted || st->peer_stopped) return true;
        if (!opt.hold_back) return !st->free_slots.empty() && st->credits > st->pending.size();
        return !st->free_slots.empty() ||
               (!st->pending.empty() && !st->pending.back().zc && st->pending.back().len < payload);
    }
    // The state as poll() bits (POLLIN, POLLOUT, POLLRDHUP, POLLHUP, POLLERR).
    short events() const;
    // Bytes read() would return now without waiting (FIONREAD).
    size_t readable_bytes() const;

    // `peek`: copy without consuming.
    std::size_t read(std::span<std::byte> buf, Deadline deadline, std::error_code &ec,
                     bool peek = false);
    std::size_t write(std::span<const std::byte> buf, Deadline deadline, std::error_code &ec);
    std::size_t write_copy(std::span<const std::byte> buf, Deadline deadline, std::error_code &ec);
    // The zero-copy write (blocking, no deadline); falls back to copying when the
    // caller's memory cannot be registered.
    std::size_t write_zcopy(std::span<const std::byte> buf, std::error_code &ec);
    // Reader side of an rts at the front: RDMA-reads up to `len` bytes of it into `dst`
    // (a blocking read's buffer) and waits for them; returns the bytes (0: broken).
    std::size_t read_direct(std::byte *dst, std::size_t len);
    // Starts an RDMA read of the front rts's next piece into its receive buffer.
    void start_bounce();
    // Waits, ignoring signals, until no RDMA read is in flight (or the stream broke, in
    // which case the VI is disconnected so that the flush completes them).
    void drain_rdma();
    // A blocking write that waits while the peer offers us regions takes them whole into
    // memory of ours and tells the peer they are done: the peer may be blocked writing
    // too, each waiting for the other to read (sockets buffer; so do we, then).
    bool pullable() const;
    void pull_regions();
    // --- staged writes (stream_stage.cc)
    // Whether a blocking copied write with `left` bytes to go stages them (makes the stage
    // at the first such write; false for good if that fails).  The size test is inline:
    // it is on every write's way.
    bool stage_wanted(size_t left) {
        return opt.stage_threshold != 0 && left >= opt.stage_threshold && stage_allowed();
    }
    bool stage_allowed();
    // A part and a send buffer (for its rts) are free.
    bool stage_room() const;
    // Copies up to a part of src into a free part and queues its rts; returns the bytes.
    size_t stage_write(const std::byte *src, size_t len);
    // p lies in the stage (the rts offers a part, not the caller's memory).
    bool staged(const std::byte *p) const {
        return stage && p >= stage && p < stage + size_t{kStagePart} * kStageParts;
    }
    // The tail of a zero-copy write that goes through the stage instead (at most a
    // quarter of it): kZcopyTail above, 0 when the peer waits on this CPU (stream_zcopy.cc).
    size_t zcopy_tail(size_t size);
    // Regions of the caller's memory offered and not done.
    bool zcopy_offered() const {
        for (uint32_t i = 0; i < offered_n; ++i)
            if (offered[(offered_head + i) % kRtsMax] < 0) return true;
        return false;
    }
    // An rts goes out (part or -1), the peer is done with the oldest (rts-done).
    void offered_push(int part);
    void offered_pop();
    // Deregisters and unmaps the stage (teardown).
    void stage_release() noexcept;
    void shutdown_write();
    void switch_out();
    void shutdown_read();
    // Orderly close in the last holder; in a holder with others alive, only this
    // process's copy goes (leave).  The Impl is empty afterwards.
    std::error_code close(Deadline deadline);
    void finish();   // the first step of the orderly close (no waiting)
    bool finished(); // the peer took everything, or the connection is over
    // Drops the connection for every holder at once, then this process's copy.
    void abort() noexcept;
    // Whether live processes other than this one hold the stream (shareable only).
    bool shared_with_others() const;
    // Disconnects, takes every descriptor back, destroys the VI, frees the memory.
    void teardown() noexcept;
    // --- shareable streams (stream_share.cc)
    // The mutex, the sleeper slots' eventfds, the holders' pipe.
    std::error_code init_shared();
    // Another holder keeps the stream: this process's copy goes, nothing else (lock
    // held on entry, released on return).
    void leave() noexcept;
    // Unmaps the memory, closes this process's descriptors, drops the NIC.
    void release_local() noexcept;

    // --- internals
    void on_send_done(VIP_DESCRIPTOR *d, VIP_RETURN rc);
    void on_recv(VIP_DESCRIPTOR *d, VIP_RETURN rc);
    void repost(uint32_t slot);
    // A read buffer whose credit is owed to the peer: a private stream gives it back to
    // the VI later (flush_reposts), off the way from a message's arrival to the reply.
    // The peer cannot use the buffer before that credit reaches it, and every credit
    // message goes after a flush (post_control).
    void repost_owed(uint32_t slot);
    void flush_reposts();
    // Credits a message may carry now: those whose buffers are back with the VI.
    uint32_t returnable() const { return st->owed - static_cast<uint32_t>(repost_later.size()); }
    // The credits the next message's header returns (its field holds 16 bits).
    uint16_t credit_grant() const {
        return static_cast<uint16_t>(std::min<uint32_t>(returnable(), 0xffff));
    }
    // A data message (posted or inline) of len bytes went out carrying c credits.
    void data_sent(uint16_t c, size_t len);
    void consume_front();
    // One data message of k bytes from p, copied by libvipl into the transport now
    // (inline_payload > 0, nothing pending, a credit at hand): false when the transport
    // has no room (nothing sent) or the stream broke.
    bool send_inline(const std::byte *p, size_t k);
    // Whether the next r bytes of a write may go out as one inline message now.
    bool inline_fits(size_t r) const {
        return r <= inline_payload && st->pending.empty() && st->credits > 0;
    }
    void post_pending();
    void post_control();
    bool send_control(detail::Kind kind);
    void set_broken(std::error_code why);
    // The peer broke the protocol: the stream ends with protocol_error, the VI goes.
    void protocol_violation();
    // Posts RDMA reads of m's region from byte `off` into dst + off, at most
    // kRdmaSlots pieces and not past len; returns where the next window starts.
    size_t post_reads(const Msg &m, size_t off, size_t len, void *dst, VIP_MEM_HANDLE lmh);
    uint8_t *rbuf(uint32_t i) const { return rbuf_ + i * stride; }
    uint8_t *sbuf(uint32_t i) const { return sbuf_ + i * stride; }
    uint8_t *cbuf(uint32_t i) const { return cbuf_ + static_cast<size_t>(i) * kCtlBufSize; }
    const uint8_t *bytes(const Msg &m) const {
        return pulled.empty() || pulled[m.slot].empty() ? rbuf(m.slot) : pulled[m.slot].data();
    }
    uint8_t header_flags() const { return shared ? detail::kFlagNoRts : 0; }
    // A fin from close() or finish() says so (discarding: nobody reads any more here).

    std::shared_ptr<detail::Nic> nic;
    StreamOptions opt;
    std::atomic<bool> nonblocking{false}; // set_nonblocking(): threads of a shareable stream
    bool shared = false;                  // shareable (opt.shareable)
    uint32_t mtu = 0;                     // header + payload: one buffer
    uint32_t payload = 0;                 // mtu - header
    uint32_t rdma_max = 0;                // the VI's MaxTransferSize: the largest RDMA read
    uint32_t nrecv = 0;                   // receive buffers: recv_data + kCtlSlots
    uint32_t recv_data = 0;
    uint32_t nsend = 0; // data send buffers
    uint32_t batch = 1;
    size_t stride = 0; // bytes between two message buffers (mtu rounded up to 64)

    uint8_t *mem = nullptr; // the mapping: State, queues, then the registered part
    size_t mem_size = 0;
    size_t reg_off = 0; // where the registered part starts
    VIP_MEM_HANDLE mh = 0;
    bool registered = false;
    State *st = nullptr;
    VIP_DESCRIPTOR *rdesc = nullptr; // nrecv
    VIP_DESCRIPTOR *sdesc = nullptr; // nsend data, kCtlSlots control, kRdmaSlots RDMA read
    uint8_t *rbuf_ = nullptr;
    uint8_t *sbuf_ = nullptr;
    uint8_t *cbuf_ = nullptr;

    VIP_VI_HANDLE vi = nullptr;
    int vi_fd = -1;
    int ep_fd = -1; // fd() with ready_fd: epoll of {vi_fd, ev_fd}
    int ev_fd = -1; // readable while data, end of stream or an error waits in the stream
    int kick_fd[kSleepSlots] = {-1, -1, -1, -1, -1, -1, -1, -1}; // shareable: sleeper slots
    int gone_r = -1, gone_w = -1;       // shareable: a pipe whose write end every holder keeps
    uint64_t version_seen = 0;          // st->version when the lock was taken
    bool watched = false;               // st->census is in this process's fork registry
    uint64_t state_looked = 0;          // coarse clock of the last look at the VI state
    mutable SpinBudget budget_;         // the policy's last answer (spin_budget)
    mutable uint64_t budget_until_ = 0; // reused until then (ticks())
    bool won_last_ = false;             // the last outcome told was a win
    // A private stream's last look that took an arrival, in ticks() (0: none since the
    // last write).  A write within kLookedTicks of it skips write_looks' look: the reply
    // to what a read just returned goes out without a second look at the queue; what
    // arrives in that moment, or was left behind by a waiter's look, waits for the next
    // call, as it would had it come just after the look.
    uint64_t drained_at = 0;
    // This process's last read that would have blocked, in ticks() (0: none since the
    // last events_before_arming()).  Its look at the VI stands for the first look of the
    // wait that follows it within kStandTicks: a non-blocking reader's EAGAIN and then
    // its poll, every event loop's step.  The wait arms before it sleeps, and arming
    // makes the wait fd readable at once for what came in between; that costs a system
    // call (the sleep that returns at once) where the look would have cost a library
    // call, so the read's look stands only while an arrival since is unlikely.
    uint64_t would_block_at = 0;
    static constexpr uint64_t kStandTicks = 8192;  // a few microseconds
    static constexpr uint64_t kLookedTicks = 2048; // about a microsecond
    static uint64_t ticks() noexcept {
#if defined(__x86_64__)
        return __builtin_ia32_rdtsc();
#else
        return 0; // no cheap clock: every write looks
#endif
    }
    std::atomic<bool> fd_given{false}; // fd() was handed out: keep it truthful (this process)
    int owner_pid = 0;                 // the process that made the stream (owns its NIC)

    // Private streams only (zero copy).
    VIP_MEM_HANDLE zc_mh = 0; // the caller's memory during a zero-copy write
    bool rdma_ok = false;     // VIs enable RDMA read (the NIC supports it)
    // Payload bytes one inline data message carries (VipQueryViInline less the header,
    // at most payload); 0: none (options, or a transport without inline sends).
    uint32_t inline_payload = 0;
    bool direct_read = false;                 // a blocking read may read regions itself: no bounce
    std::vector<uint32_t> repost_later;       // read buffers not yet given back (repost_owed)
    std::vector<std::vector<uint8_t>> pulled; // per receive slot: a pulled region, else empty
    std::vector<std::vector<uint8_t>> leaked; // pulls a broken VI may still write into
    std::byte *stage = nullptr;               // kStageParts x kStagePart, registered
    VIP_MEM_HANDLE stage_mh = 0;
    bool stage_failed = false; // the stage could not be made: writes copy as before
    // The peer reads our memory with no call of ours (VIP_VI_ENDPOINTS::PeerReadsAlone): a
    // write may return and leave a staged part to it.  On tcp our progress serves its
    // reads, and a writer that returned may not call again for a long time.
    bool peer_reads_alone = false;
    uint32_t stage_busy = 0;      // bit i: part i queued or offered, not done
    int8_t offered[kRtsMax] = {}; // rts posted and not done, oldest first: part or -1
    uint32_t offered_head = 0, offered_n = 0;
    Address local, peer; // as libvipl reported them when the connection was made
};

template <class Done>
std::error_code Stream::Impl::wait_until(Done &&done, Deadline deadline, bool to_read) {
    // What is here already needs no look at the VI (on tcp a recv() that finds nothing).
    if (done()) return {};
    const Look look = to_read ? Look::read : Look::wait;
    for (bool first = true;; first = false) {
        progress(!first ? look : to_read ? Look::drain : Look::all);
        if (done()) return {};
        if (nonblocking.load(std::memory_order_relaxed)) {
            st->stats.would_block++;
            return std::make_error_code(std::errc::operation_would_block);
        }
        if (passed(deadline)) return std::make_error_code(std::errc::timed_out);
        // Waiting is the time to give read buffers back.
        flush_reposts();
        Spin spin;
        if (opt.spin_us) spin.add(spin_budget());
        if (spin.active()) {
            // Sleeping costs a wake-up of tens of microseconds: poll the VI first.  Other
            // holders take the lock between two looks.
            unlock();
            bool got = spin.run(
                [&] {
                    Guard g(*this);
                    // A completion that does not end the wait still shows the peer at
                    // work (a reader taking what a writer waits to add to): spin on.
                    if (progress(look) && !done()) spin.extend();
                    return done();
                },
                deadline);
            lock();
            spin.report(*this, got, got);
            if (got) st->stats.spin_wins++;
            // A shareable stream's state may have moved since the look (another holder
            // took the lock): look again, and keep the lock until this one sleeps.
            if (shared && !done()) progress(look);
            if (done()) return {};
            if (got) continue;
        }
        // A reader's looks leave send completions in the VI: one left there would wake a
        // sleeper armed for them at once, and one may be what the caller waits for (an
        // RDMA read that finished since the look) or free what a queued message needs.
        // A sleeper armed for arrivals alone hears of none (and waits for none).
        if (reap_for_arming(arm_events(to_read))) {
            progress(look);
            if (done()) return {};
        }
        st->stats.sleeps++;
        if (!sleep(deadline, to_read)) return std::make_error_code(std::errc::interrupted);
    }
}

} // namespace vipl
