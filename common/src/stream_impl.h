// The state of one stream: its VI, registered buffers, credits and queues.
//
// Memory (one registered mapping): descriptors (receive, data send, control send), then
// the receive buffers (mtu bytes each), the data send buffers (mtu) and the control send
// buffers (64 bytes).  Receive descriptors are posted FIFO and any message may land in
// any of them, so every receive buffer holds a whole message.
//
// Flow control: the peer may have at most `recv_data` data messages unreturned (its
// credits, granted by a first credit message).  Control messages need no credit: a
// credit message is sent only when at least `batch` (= ceil(recv_data / 4)) credits are
// owed, so at most 4 are ever unprocessed at the peer, plus one fin, one fin-ack and
// kRtsMax rts-dones: kCtlSlots extra receive buffers cover them, and the peer never
// finds no receive posted.
//
// Zero copy (rendezvous): a blocking write of at least zcopy_threshold bytes registers
// the caller's memory for RDMA read and sends rts messages instead of data, each
// offering a region of at most kRegionMax bytes, at most kRtsMax at a time; an rts
// takes a slot and a credit and queues behind buffered data like a data message.  The
// reader takes a region with RDMA reads: straight into the program's buffer when a
// blocking read without deadline has room (the only copy), otherwise one piece at a
// time into the rts's own receive buffer (the "bounce", started as soon as the rts is
// first in line, so non-blocking readers see readiness).  Finishing a region returns
// its credit with an rts-done; the write returns once every region it offered is done.
// A side blocked in a write while regions are offered to it pulls them into heap memory
// (pull_regions), so two programs writing to each other before reading do not deadlock.
#pragma once

#include "frame.h"
#include "nic.h"
#include "vipl/stream.h"

#include <poll.h>

#include <deque>
#include <functional>
#include <memory>
#include <system_error>
#include <vector>

namespace vipl {

// A deadline as a VIPL timeout in milliseconds (VIP_INFINITE for kNever, 0 when past).
VIP_ULONG timeout_ms(Deadline deadline);

struct Stream::Impl {
    static constexpr uint32_t kCtlSlots = 8;
    static constexpr uint32_t kCtlBufSize = 64;
    static constexpr uint32_t kRtsMax = 2;             // regions offered at a time
    static constexpr uint32_t kRegionMax = 512 * 1024; // bytes per region
    static constexpr uint32_t kRdmaSlots = 16;         // RDMA read descriptors
    static constexpr size_t kDirectMin = 16 * 1024;    // room for a direct read

    // Allocates and registers memory, creates the VI with `mtu` and posts every receive.
    static std::unique_ptr<Impl> create(std::shared_ptr<detail::Nic> nic,
                                        const StreamOptions &options, uint32_t mtu,
                                        std::error_code &ec);
    ~Impl();

    // Called once the VI is connected: grants the peer its credits.
    void start();

    // Takes every completion, then posts what flow control allows.  Never blocks.
    void progress();
    // Makes progress until done() holds (the predicate must also accept `broken`):
    // polls the VI for spin_us, then sleeps on its wait fd.  Errors: would_block (at once
    // in non-blocking mode), timed_out, interrupted.
    std::error_code wait_until(const std::function<bool()> &done, Deadline deadline);
    // Sets or clears the readiness eventfd behind fd() to match the state.
    void update_ready();
    bool readable() const { return front_ready(false) || (rq.empty() && fin_rx) || broken; }
    // The first message can give bytes now (or be finished); `direct`: a blocking read
    // may RDMA-read an rts region itself.
    bool front_ready(bool direct) const;
    // write() would accept a byte, or fail at once.
    bool writable() const {
        return broken || fin_wanted || !free_slots.empty() ||
               (!pending.empty() && !pending.back().zc && pending.back().len < payload);
    }
    // The state as poll() bits (POLLIN, POLLOUT, POLLRDHUP, POLLHUP, POLLERR).
    short events() const;

    std::size_t read(std::span<std::byte> buf, Deadline deadline, std::error_code &ec);
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
    std::error_code close(Deadline deadline);
    // Disconnects, takes every descriptor back, destroys the VI, frees the memory.
    void teardown() noexcept;

    // --- internals
    void on_send_done(VIP_DESCRIPTOR *d, VIP_RETURN rc);
    void on_recv(VIP_DESCRIPTOR *d, VIP_RETURN rc);
    void repost(uint32_t slot);
    void consume_front();
    void post_pending();
    void post_control();
    bool send_control(detail::Kind kind);
    void set_broken(std::error_code why);
    uint8_t *rbuf(uint32_t i) const { return rbuf_ + i * stride; }
    uint8_t *sbuf(uint32_t i) const { return sbuf_ + i * stride; }
    uint8_t *cbuf(uint32_t i) const { return cbuf_ + static_cast<size_t>(i) * kCtlBufSize; }

    std::shared_ptr<detail::Nic> nic;
    StreamOptions opt;
    uint32_t mtu = 0;     // header + payload, the VI's MaxTransferSize
    uint32_t payload = 0; // mtu - header
    uint32_t nrecv = 0;   // receive buffers: recv_data + kCtlSlots
    uint32_t recv_data = 0;
    uint32_t nsend = 0; // data send buffers
    uint32_t batch = 1;
    size_t stride = 0; // bytes between two message buffers (mtu rounded up to 64)

    uint8_t *mem = nullptr;
    size_t mem_size = 0;
    VIP_MEM_HANDLE mh = 0;
    bool registered = false;
    VIP_DESCRIPTOR *rdesc = nullptr; // nrecv
    VIP_DESCRIPTOR *sdesc = nullptr; // nsend data, kCtlSlots control, kRdmaSlots RDMA read
    uint8_t *rbuf_ = nullptr;
    uint8_t *sbuf_ = nullptr;
    uint8_t *cbuf_ = nullptr;

    VIP_VI_HANDLE vi = nullptr;
    int vi_fd = -1;
    int ep_fd = -1; // fd(): epoll of {vi_fd, ev_fd}
    int ev_fd = -1; // readable while data, end of stream or an error waits in the stream
    bool ev_set = false;
    short fd_events = POLLIN; // which of events() make ev_fd readable

    // Receive side.
    struct Msg {
        uint32_t slot = 0, off = 0, end = 0; // bytes [off, end) of bytes() are unread
        bool rts = false;                    // a region to RDMA-read: the rest is its state
        detail::Rts region{};
        uint32_t taken = 0;        // bytes of the region read (into off..end or a program)
        bool done_sent = false;    // its rts-done is owed already (pulled)
        std::vector<uint8_t> heap; // a pulled region (see pull_regions), else empty
    };
    // Posts RDMA reads of m's region from byte `off` into dst + off, at most
    // kRdmaSlots pieces and not past len; returns where the next window starts.
    size_t post_reads(const Msg &m, size_t off, size_t len, void *dst, VIP_MEM_HANDLE lmh);
    const uint8_t *bytes(const Msg &m) const {
        return m.heap.empty() ? rbuf(m.slot) : m.heap.data();
    }
    std::deque<Msg> rq; // data taken off the VI, not yet read
    uint32_t owed = 0;  // credits to return to the peer
    bool fin_rx = false;
    bool fin_ack_rx = false;
    bool need_fin_ack = false;
    bool discarding = false; // closing: data is dropped as it arrives

    // Send side.
    uint32_t credits = 0;             // data messages we may send
    std::vector<uint32_t> free_slots; // data send buffers
    std::vector<uint32_t> free_ctl;   // control send buffers
    struct Out {
        uint32_t slot, len;            // payload bytes (an rts: the region's)
        const std::byte *zc = nullptr; // an rts offering the caller's bytes from here
    };
    std::deque<Out> pending;  // written, not posted yet (no credit)
    uint32_t rts_posted = 0;  // regions offered, not done
    VIP_MEM_HANDLE zc_mh = 0; // the caller's memory during a zero-copy write
    bool rdma_ok = false;     // VIs enable RDMA read (the NIC supports it)
    uint32_t need_rts_done = 0;
    uint32_t rdma_posted = 0;                 // RDMA reads in flight
    uint32_t bounce_len = 0;                  // bytes of the bounce read in flight (0: none)
    bool direct_read = false;                 // a blocking read may read regions itself: no bounce
    std::vector<std::vector<uint8_t>> leaked; // pulls a broken VI may still write into
    bool fin_wanted = false;
    bool fin_tx = false;

    Address local, peer;    // as libvipl reported them when the connection was made
    bool connected = false; // start() ran
    bool broken = false;
    std::error_code error; // why the connection broke
    StreamCounters stats;
};

} // namespace vipl
