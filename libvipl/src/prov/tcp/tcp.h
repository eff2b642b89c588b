// The cross-host provider "tcp": VI semantics emulated over one TCP
// connection per VI.  Connection management (listen, connect, accept) goes
// through Boost.Asio socket objects in non-blocking mode, waited on with the
// library's own interruptible waits; the data path uses the descriptor
// directly.
//
// Discriminators name TCP ports: a two-byte discriminator is the port itself
// (network order), any other hashes into TCP_PORT_BASE + [0, TCP_PORT_RANGE).
// Processes whose discriminators share a port all listen on it
// (SO_REUSEPORT); a connection that reaches the wrong one is handed to the
// right one over an abstract AF_UNIX socket named after the discriminator.
#pragma once

#include "core/objects.h"
#include "prov/provider.h"
#include "prov/tcp/tcp_wire.h"

#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <vector>

namespace vipl::tcp {

// An accepted connection whose Hello is arriving or waits for a taker; or
// (handover) a connection from another process that is handing one over.
struct Incoming {
    int fd = -1;
    bool handover = false; // fd is the hand-over connection; its message is to come
    uint32_t got = 0;
    uint64_t deadline = 0; // for the Hello to arrive
    bool taken = false;    // a thread is answering it
    bool watched = false;  // in its listener's `arrivals` set (its Hello is still to come)
    uint8_t buf[kHelloWire];
    Hello hello{};
};

struct TcpNic;

// A discriminator this process serves: its hand-over socket, and the NIC
// that serves it.  VipGetConnWaitFd gives wait_fd, an epoll set of the
// listener's arrivals, the hand-over socket and ready_fd, an eventfd kept
// set while a complete request for disc waits for a taker (ready).
struct Served {
    std::string disc;
    int fd = -1;
    const TcpNic *nic = nullptr;
    int wait_fd = -1;
    int ready_fd = -1;
    bool ready = false;
};

// One TCP port this process listens on at one address, with what arrived
// there.  The NICs of that address share it (listen_lock() guards it): two
// sockets of one process on a port (SO_REUSEPORT) would split the
// connections, and those landing at a NIC nobody waits on would go unanswered.
struct Listener {
    uint16_t port = 0;
    int fd = -1;
    sockaddr_storage local{};
    socklen_t local_len = 0;
    int refs = 0; // NICs using it
    // An epoll set of fd and the incoming connections whose Hello (or
    // hand-over message) is still to come, made with the first wait_fd:
    // whatever a pump could take.
    int arrivals = -1;
    std::vector<Incoming *> incoming;
    std::vector<Served> served;
};

// The NIC: one local interface address.
struct TcpNic {
    sockaddr_storage local{}; // address this NIC listens on and connects from (port 0)
    socklen_t local_len = 0;
    int family = AF_INET;
    std::string ifname;
    std::vector<Listener *> listeners; // used by this NIC (listen_lock())
};

inline TcpNic *tcp_nic(Nic *nic) {
    return static_cast<TcpNic *>(nic->prov);
}

// What the receiver is doing with the payload of the current frame.
enum class Sink : uint8_t { none, recv, rdma, read_resp, discard };

constexpr uint32_t kRxBuffer = 16384;

// A frame owed to the peer besides the send queue, in order: an answer to
// one of its RDMA reads, or an error report.
struct Owed {
    enum Kind : uint8_t { kRead, kError } kind;
    uint32_t length; // kRead: bytes asked for
    uint32_t handle; // kRead: region
    uint32_t status; // kRead: 0 or kReadRefused; kError: the VIP_ERROR_CODE or kNoError
    uint64_t addr;   // kRead: address; kError: sequence number
};

struct P2p;

// Provider state of one VI (in the shared arena for a shareable VI, so any
// holder can carry on where another stopped).
struct Endpoint {
    bool up = false;
    int sock = -1;
    int epfd = -1;             // the socket, for input and (while output is blocked) output
    bool want_out = false;     // output waits for room in the socket
    bool sock_watched = false; // the socket is in epfd (watch_socket)
    uint16_t reliability = 0;
    uint64_t mtu = 0;
    uint32_t ack_threshold = 0; // sends above it are acknowledged under reliable delivery
    uint32_t frame_wait_us = 0; // TCP_FRAME_WAIT_US
    uint64_t dead_check = 0;    // next time the socket's error state is looked at

    // Sending: frames go out whole, one after the other.  Header-only frames
    // (acknowledgements, error reports, refused reads) gather in `ctl` and
    // go out in the same system call as the frame that follows them; `cur`
    // is the frame with a payload partly written: the send-queue entry at
    // sq.cursor, or the read answer at the head of the owed frames.
    uint8_t ctl[4 * kFrameHeader];
    uint32_t ctl_len = 0, ctl_done = 0;
    enum Cur : uint8_t { kCurNone, kCurData, kCurOwed } cur = kCurNone;
    uint8_t tx_header[kFrameHeader];
    uint64_t tx_done = 0; // bytes of header + payload written
    uint64_t tx_total = 0;
    // Flow control (see tcp_wire.h): bytes written / credited by the peer /
    // its window; bytes read / credited to the peer / our window.
    uint64_t tx_bytes = 0, peer_taken = 0;
    uint32_t window = 0;
    uint64_t rx_bytes = 0, credit_sent = 0;
    uint32_t my_window = 0;
    bool owe_credit = false;
    uint64_t ack_next = 0; // sequence number the next acknowledged message gets
    uint64_t ack_upto = 0; // the peer acknowledged sequence numbers below this
    uint32_t awaiting = 0; // entries waiting for an ack or a read answer
    bool owe_ack = false;  // the peer is to learn ack_taken
    bool corked = false;   // frames wait in the kernel for the next write (MSG_MORE)
    // Owed frames: a ring that grows as needed (the peer's outstanding reads
    // bound it).  After a fatal error found here, `closing`: what is owed
    // goes out, the error report last, then nothing more.
    Owed *owed = nullptr;
    uint32_t owed_cap = 0;
    uint64_t owed_head = 0, owed_tail = 0;
    bool closing = false;

    // Receiving: buffered bytes [rx_start, rx_end) of rx (kRxBuffer).
    uint8_t *rx = nullptr;
    uint32_t rx_start = 0, rx_end = 0;
    bool in_payload = false;
    Frame frame{};
    Sink sink = Sink::none;
    uint64_t got = 0;       // payload bytes of the current frame taken
    uint64_t ack_taken = 0; // acknowledged messages taken (sequence of the next)
    uint64_t ack_sent = 0;  // ... of which the peer has been told
    bool rx_more = false;   // stopped before the socket ran dry
    uint32_t lowat = 1;     // SO_RCVLOWAT: bytes that complete the frame being received
    // A sleeper blocked in recv() into rx beyond rx_end (ViOps::DirectSleep):
    // 1 while it is in recv, 2 once it returned; nothing else reads the
    // socket or moves rx meanwhile.  Accessed with __atomic builtins.
    int direct = 0;
    // The last read found the socket empty or emptied it (mark_dry; the direct
    // sleeper's): the next progress reads nothing before rx_dry_until (now_ns).
    bool rx_dry = false;
    uint64_t rx_dry_until = 0;
    // A message of ours went out after the last one we received: the peer owes an
    // answer (peer_busy's guess; wrong guesses are counted by the spin policy).
    bool answer_owed = false;

    VIP_VI_ATTRIBUTES peer_attrs{};
    P2p *p2p = nullptr;
};

inline Endpoint *endpoint(Vi *vi) {
    return static_cast<Endpoint *>(vi->prov);
}

// Entry flags.
constexpr uint16_t kAwaitAck = kWqProv1;   // waits for the acknowledgement of ack_seq
constexpr uint16_t kAwaitResp = kWqProv2;  // an RDMA read waiting for its answer
constexpr uint16_t kFilling = kWqProv3;    // a receive the current frame is filling
constexpr uint16_t kAckPending = kWqProv4; // going out; will then wait for ack_seq's ack

// What a send-queue entry's provider words (WqEntry::p0..p2) hold here.
// The sequence number its acknowledgement names.
inline uint64_t &ack_seq(WqEntry &e) {
    return e.p1;
}
// The status its frame completes with when the descriptor turned out bad while going
// out (the frame is padded out with zeros); 0: none.
inline uint64_t &fault(WqEntry &e) {
    return e.p2;
}

// tcp_nic.cc
VIP_RETURN nic_open(Nic *nic, const char *device);
void nic_close(Nic *nic);
VIP_RETURN ns_by_name(Nic *nic, const char *name, VIP_NET_ADDRESS *out, VIP_ULONG index);
// The resolver behind them (tcp_resolve.cc): numeric, /etc/hosts, then DNS;
// VIP_INTERRUPTED when a signal handler ran while it waited for a server.
VIP_RETURN resolve_name(const char *name, int family, std::vector<sockaddr_storage> *out);
VIP_RETURN resolve_addr(const sockaddr_storage &addr, std::string *name);
VIP_RETURN ns_by_addr(Nic *nic, const VIP_NET_ADDRESS *addr, char *name, VIP_ULONG *len);
VIP_RETURN autodiscovery(Nic *nic, VIP_AUTODISCOVERY_LIST *list);
// Sizes a socket's receive buffer for TCP_WINDOW (before it connects or
// listens), and the window it can honour once it has.
void size_receive_buffer(int fd);
uint32_t own_window(int fd);
// The TCP port a discriminator maps to.
uint16_t port_of(const uint8_t *disc, uint16_t len);
// The socket address of addr (its host part; this NIC's own if empty).
bool to_sockaddr(const Nic *nic, const VIP_NET_ADDRESS *addr, sockaddr_storage *out,
                 socklen_t *len);
std::string address_text(const sockaddr_storage &ss);

// tcp_listen.cc: where connections arrive
// The listener of port (created on first use, lock held); nullptr and *rc set on failure.
Listener *listener_for(Nic *nic, uint16_t port, VIP_RETURN *rc);
// Guards every Listener of the process and the NICs' lists of them.
Mutex &listen_lock();
// Starts serving disc on l: connections for it reaching another process come here.
VIP_RETURN serve(Nic *nic, Listener *l, const uint8_t *disc, uint16_t len);
// Accepts what is waiting, reads Hellos, hands on connections for discriminators
// served elsewhere.  Returns a complete Hello of `type` that asks for `disc`
// (and, if from_len, comes from `from`), marked taken; nullptr if none yet.
Incoming *take_incoming(Nic *nic, Listener *l, uint32_t type, const uint8_t *disc, uint16_t len,
                        const uint8_t *from = nullptr, uint16_t from_len = 0);
// What to poll to learn of more (at most max); the earliest Hello deadline in *deadline.
int incoming_fds(Nic *nic, Listener *l, pollfd *fds, int max, uint64_t *deadline);
// The descriptor of VipGetConnWaitFd for disc, which `nic` serves on l (lock held).
VIP_RETURN request_wait_fd(Nic *nic, Listener *l, const uint8_t *disc, uint16_t len, int *fd);
void incoming_free(Incoming *in);
void listeners_close(TcpNic *t);

// tcp_conn.cc
VIP_RETURN connect_wait(Nic *nic, const VIP_NET_ADDRESS *local, uint64_t deadline, ConnReq *req,
                        VIP_NET_ADDRESS *remote, VIP_VI_ATTRIBUTES *remote_attrs);
VIP_RETURN connect_wait_fd(Nic *nic, const VIP_NET_ADDRESS *local, int *fd);
VIP_RETURN connect_accept(ConnReq *req, Vi *vi);
VIP_RETURN connect_reject(ConnReq *req);
void conn_free(ConnReq *req);
VIP_RETURN connect_request(Vi *vi, const VIP_NET_ADDRESS *local, const VIP_NET_ADDRESS *remote,
                           uint64_t deadline, VIP_VI_ATTRIBUTES *remote_attrs);
VIP_RETURN peer_request(Vi *vi, const VIP_NET_ADDRESS *local, const VIP_NET_ADDRESS *remote,
                        uint64_t deadline);
VIP_RETURN peer_progress(Vi *vi, VIP_VI_ATTRIBUTES *remote_attrs, pollfd *fds, int *nfds,
                         uint64_t *deadline);
void p2p_free(Endpoint *ep);
// Handshake records over a non-blocking socket, by the deadline; an
// interruptible wait ends with VIP_INTERRUPTED when a signal handler runs.
VIP_RETURN send_hello(int fd, const Hello &h, uint64_t deadline, bool interruptible = true);
VIP_RETURN recv_hello(int fd, Hello *h, uint64_t deadline, bool interruptible = true);
Hello make_hello(uint32_t type, Vi *vi, const VIP_NET_ADDRESS *local);

// tcp_endpoint.cc
VIP_RETURN vi_create(Vi *vi);
void vi_destroy(Vi *vi);
// Makes a connected socket the VI's transport.
VIP_RETURN start_endpoint(Vi *vi, int sock, const Hello &peer);
VIP_RETURN endpoints(Vi *vi, VIP_VI_ENDPOINTS *out);
void disconnect(Vi *vi);
void leave(Vi *vi);
void abandon(Vi *vi);
void transport_down(Vi *vi, Endpoint *ep);
// The connection ended under us (reset, hang-up, dead link): complete what
// can be, fail the rest and the VI with code.
void connection_lost(Vi *vi, Endpoint *ep, VIP_ERROR_CODE code);
// Direct sleep (provider.h); stop_direct ends one before the socket or rx go.
bool direct_begin(Vi *vi, ViOps::DirectSleep *d);
void direct_end(Vi *vi, const ViOps::DirectSleep &d, ssize_t n, int err);
void stop_direct(Endpoint *ep);
// How long a direct sleeper's recv() blocks at most (SO_RCVTIMEO).
constexpr uint64_t kDirectSliceNs = 20'000'000;
// How long "the socket is empty" (a read that came back short or with EAGAIN) is
// trusted without asking again: about what a request-reply peer on another CPU takes
// to answer the fastest.
constexpr uint64_t kDryTrustNs = 2'000;
// An error found here that ends the connection: the peer learns `remote`
// about message `seq`; this VI fails with `local`.
void break_connection(Vi *vi, Endpoint *ep, VIP_ERROR_CODE local, uint32_t remote, uint64_t seq,
                      VIP_DESCRIPTOR *desc = nullptr);
int wait_fds(Vi *vi, pollfd *fds, int max);
int sleep_fds(Vi *vi, pollfd *fds, int max);
void check_peer(Vi *vi);
bool peer_busy(Vi *vi);
// Makes epfd watch the socket for output room too (while output is short of it).
void set_want_out(Endpoint *ep, bool on);

// tcp_send.cc
VIP_RETURN post_send(Vi *vi, WqEntry *e, const PostedDesc &d);
void post_recv(Vi *vi, WqEntry *e);
// Writes what is owed (control frames, read answers, the send queue) until
// the socket is full; false if the connection failed.
bool flush_out(Vi *vi, Endpoint *ep, bool more = false);
// The peer acknowledged sequence numbers below upto; false if out of range.
bool acked(Vi *vi, Endpoint *ep, uint64_t upto);
// The peer reports message seq failed (and the connection ends unless code is kNoError).
bool remote_error(Vi *vi, Endpoint *ep, uint64_t seq, uint32_t code);
// Queues an owed frame; false if the peer asks for more than any queue holds.
bool owe(Vi *vi, Endpoint *ep, const Owed &o);
void free_owed(Vi *vi, Endpoint *ep);

// tcp_recv.cc
void progress(Vi *vi);
bool pending(Vi *vi);
bool held(Vi *vi);
// Sends the acknowledgements held back for a reply to carry.
void idle(Vi *vi);
// Reads and handles frames until the socket is dry; false if the connection failed.
bool receive(Vi *vi, Endpoint *ep);
// The oldest RDMA read of the send queue still waiting for its answer.
WqEntry *oldest_read(Vi *vi);

} // namespace vipl::tcp
