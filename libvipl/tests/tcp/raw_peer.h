// The far end of a tcp VI played by hand: a raw socket that speaks the
// handshake and writes whatever frames a test (or the fuzz_stream target)
// wants, well-formed or not, and reads back what the VI sends.  No Catch2
// here: the fuzz targets use it too.
#pragma once

#include "prov/tcp/tcp_wire.h"

#include <vipl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vt {

// Picks a free TCP port of 127.0.0.1 and makes `nic` (a tcp NIC) listen on
// it: the port is also the two-byte discriminator that names it.  0 if no
// port could be had.
uint16_t raw_listen(VIP_NIC_HANDLE nic);

// One connection to a VI.  Not copyable; closing resets the connection (no
// TIME_WAIT left behind, however many connections a fuzz run makes).
class RawPeer {
public:
    RawPeer() = default;
    ~RawPeer();
    RawPeer(const RawPeer &) = delete;
    RawPeer &operator=(const RawPeer &) = delete;

    // Connects to the Idle VI `vi` of `nic`, which raw_listen made listen on
    // `port`: a Hello request that matches the VI's attributes (and its Ack,
    // sent at once), then VipConnectWait and VipConnectAccept on this thread,
    // then the VI's Accept is read.  The VI is Connected afterwards.  The
    // peer offers `window` bytes of flow-control window (tcp_wire.h) and
    // gives no credit unless the caller sends it.
    // Returns "" on success, else what went wrong.
    std::string connect(VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, uint16_t port, int timeout_ms,
                        uint32_t window = kLargeWindow);
    // More than any test sends: the VI never waits for credit.
    static constexpr uint32_t kLargeWindow = 1u << 20;

    int fd() const { return fd_; }
    uint64_t mtu() const { return mtu_; }

    // Writes what the socket takes now (never blocks); *sent gets the count.
    // False once the VI's side has closed (reset or broken pipe).
    bool send_some(const void *p, size_t n, size_t *sent);
    // Writes everything, waiting up to timeout_ms for room; false if the
    // connection broke or time ran out.  Only for what fits in the socket
    // buffers, or while another thread drives the VI.
    bool send_all(const void *p, size_t n, int timeout_ms);
    // Appends what the VI sent and is readable now (never blocks).  False
    // once the stream has ended (end of file or reset).
    bool drain(std::vector<uint8_t> *out);
    // Waits up to timeout_ms for the VI's side to end the stream, collecting
    // what it sent before.  True if it ended in time.
    bool wait_closed(int timeout_ms, std::vector<uint8_t> *out = nullptr);
    // Ends what the peer sends (FIN); the VI's side stays readable.
    void finish();
    // Resets the connection.
    void close();

private:
    int fd_ = -1;
    uint64_t mtu_ = 0;
};

// A frame header in wire order.
std::vector<uint8_t> header(const vipl::tcp::Frame &f);
// A header followed by f.length payload bytes (copied from payload, or `fill`).
std::vector<uint8_t> frame(const vipl::tcp::Frame &f, const void *payload = nullptr,
                           uint8_t fill = 0);

// A frame the VI sent, with its payload.
struct Received {
    vipl::tcp::Frame f;
    std::vector<uint8_t> payload;
};
// Splits what a VI sent into frames, as a peer with this mtu would.
// Complete frames are appended to out; *used gets the bytes they took (a
// partial frame may follow).  False if a complete header is malformed.
bool split_frames(const std::vector<uint8_t> &bytes, uint64_t mtu, std::vector<Received> *out,
                  size_t *used = nullptr);

} // namespace vt
