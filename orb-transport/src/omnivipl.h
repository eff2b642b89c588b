// The giop:vipl transport's private declarations: one class per file in this folder.
//
//   options.cc     the configuration table (-ORBvipl... / omniORB.cfg keys)
//   identity.cc    this host's identity, published in IORs
//   ior.cc         the IOR component: encodeIOR / decodeIOR interceptors
//   selector.cc    the server loop: poll over connections, lazy setSelectable, Peek
//   closer.cc      the orderly close of let-go connections, off omniORB's threads
//   connection.cc  one Stream as a giopConnection (Send/Recv/Shutdown)
//   address.cc     giopAddress: Connect
//   active.cc      giopActiveConnection / giopActiveCollection (bidirectional GIOP)
//   endpoint.cc    giopEndpoint: Bind, AcceptAndMonitor (accepts when the listener's fd is ready)
//   transport.cc   giopTransportImpl "giop:vipl", the initialiser, transport rules
//
// omniORB's classes live in namespace omni; ours in vipl::orb.  Built against the
// internal headers of omniORB 4.2.5: another omniORB version needs a rebuild.
#pragma once

#include <omniORB4/CORBA.h>
#include <omniORB4/giopEndpoint.h>

#include "vipl/stream.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace vipl::orb {

// ---------------------------------------------------------------- options.cc
// The ORB's options: the stream's own (common's configuration table: one default and
// one range per setting, whatever program uses the stream), and the provider.
struct Options {
    StreamOptions stream;                      // viplSpinTime, viplBufferSize, ...
    Transport provider = Transport::automatic; // viplProvider: auto | shm | tcp
};
Options &options();
StreamOptions stream_options();
// Registers the option handlers with omniORB (before ORB_init parses options).
void register_option_handlers();
// "shm", "tcp", "auto".
const char *provider_name(Transport t);

// ---------------------------------------------------------------- identity.cc
// "<hostname>/<boot id>": equal only for processes on the same running kernel.
const std::string &host_identity();
// This host's name as published (gethostname()).
const std::string &host_name();

// ---------------------------------------------------------------- ior.cc
// Our IOR component tag ("VIPL"); omniORB uses 0x41545401-04, TAO 0x54414f00-0f.
inline constexpr uint32_t kTagViplTransport = 0x5649504c;
// Remembers a published endpoint for the encodeIOR interceptor.
void publish_address(const std::string &host, uint16_t port, Transport provider);
void install_ior_interceptors();
void remove_ior_interceptors();

// ---------------------------------------------------------------- selector.cc
class Connection;

// The loop behind AcceptAndMonitor and giopActiveCollection::Monitor: one thread scans
// the connections marked selectable and calls back when one has data.  Mirrors
// omniORB's SocketCollection: setSelectable(now=0) is seen at the next scan
// (scan_interval), now=1 and data_in_buffer wake the loop, Peek() watches one
// connection for one scan interval without the loop dispatching it.
class Selector : public std::enable_shared_from_this<Selector> {
public:
    static constexpr int kScanMs = 50;
    static constexpr int kIdleScans = 20;

    Selector();
    ~Selector();
    Selector(const Selector &) = delete;
    Selector &operator=(const Selector &) = delete;

    void add(Connection *c);
    void remove(Connection *c);
    void set_selectable(Connection *c, int now, bool data_in_buffer);
    void clear_selectable(Connection *c);
    bool is_selectable(Connection *c);
    bool peek(Connection *c);

    // Waits at most one scan interval (or until woken) and calls func for every
    // selectable connection with data.  `extra_fd` (or -1) is polled too; returns true
    // when it was readable.
    bool select(omni::giopConnection::notifyReadable_t func, void *cookie, int extra_fd);
    // Makes a select() in progress return.
    void wake();
    bool empty();

private:
    struct Entry {
        Connection *conn;
        bool selectable = false;
        bool data_in_buffer = false;
        bool peeking = false;
        bool peek_go = false;
        bool polled = false;
    };
    Entry *find(Connection *c);

    std::mutex mu_;
    std::condition_variable peek_cv_;
    std::vector<Entry> entries_;
    bool changed_ = true;
    bool force_scan_ = true;
    int idle_ = kIdleScans;
    Clock::time_point next_scan_{};
    std::vector<Connection *> polled_; // the connections of the last scan
    int wake_fd_ = -1;
};

// ---------------------------------------------------------------- closer.cc
// Ends the orderly close of streams omniORB has let go.  A Connection's destructor
// calls finish() (what was written leaves, then the end of stream) and hands the stream
// here, so it returns at once as a socket's close does: omniORB's shutdown waits only
// a bounded time for its threads, and a destructor blocked on an idle peer's
// acknowledgement (up to the linger) made it free state a worker still used.  One
// thread of ours, started at the first hand-over, lets each stream go once the peer
// has taken everything (finished()) or its deadline passed; at exit the rest get what
// is left of their deadlines.
class Closer {
public:
    static Closer &instance();
    void add(Stream s, Deadline deadline);
    ~Closer();

private:
    struct Lingering {
        Stream stream;
        Deadline deadline;
    };
    void run();

    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Lingering> lingering_;
    std::thread thread_;
    bool stop_ = false;
};

// ---------------------------------------------------------------- connection.cc
// Milliseconds until an omniORB deadline (rounded up), -1 for none (0), 0 when past.
int ms_until(const omni_time_t &deadline);

class Connection : public omni::giopConnection {
public:
    Connection(Stream stream, std::shared_ptr<Selector> selector, std::string myaddr,
               std::string peeraddr);
    ~Connection() override;

    int Send(void *buf, size_t sz, const omni_time_t &deadline) override;
    int Recv(void *buf, size_t sz, const omni_time_t &deadline) override;
    void Shutdown() override;
    const char *myaddress() override { return my_.c_str(); }
    const char *peeraddress() override { return peer_.c_str(); }
    void setSelectable(int now = 0, CORBA::Boolean data_in_buffer = 0) override;
    void clearSelectable() override;
    CORBA::Boolean isSelectable() override;
    CORBA::Boolean Peek() override;

    // The stream's wait fd (Stream::wait_fd()): quiet until ready_or_armed() armed it,
    // so a peer rings it only while this side may sleep, not for every message (a
    // stream whose fd() was handed out arms after every call: a system call per message
    // at each end, most of a round trip's cost when both share a CPU).
    int fd() const { return fd_; }
    // True when a read would return something now (data, end or error); moves the
    // stream first, so that a spurious wake-up of fd() (a send completion, a credit)
    // reports false.  Takes the stream's lock briefly.
    bool readable_now();
    // After the caller's last look, before it polls fd(): true if the stream has `want`
    // (or an error) now, else arms fd() for the next event and returns false (what
    // came since the look makes fd() readable at once).  `sending`: called by a Send.
    bool ready_or_armed(short want, bool sending = false);
    // Waits until fd() or shutdown is readable, at most timeout_ms (-1: no limit),
    // arming fd() first.  Returns false on timeout.
    bool wait(int timeout_ms);
    bool is_shutdown() const { return shutdown_.load(std::memory_order_acquire); }

    // The spin a waiter may make before it sleeps, and how it ended: the stream's spin
    // policy (libvipl's, options().stream.spin_us as its base; vipl/spin.h).  Any thread.
    SpinBudget spin_budget() const;
    void spin_outcome(bool won);

private:
    template <typename Op>
    int transfer(const omni_time_t &deadline, bool sending, Op op);
    // Runs op on the stream under mu_.  A call that moves the stream may take the
    // credits a blocked Send waits for (they leave no readiness on fd()): it rings
    // progress_fd_, which that Send also polls.
    template <typename Op>
    auto locked(Op op, bool sending);

    std::mutex mu_; // serialises the Stream; never held while sleeping
    Stream stream_;
    int fd_;
    int shutdown_fd_;
    int progress_fd_;
    bool send_waiting_ = false; // under mu_; omniORB sends from one thread at a time
    std::atomic<bool> shutdown_{false};
    std::shared_ptr<Selector> selector_;
    std::string my_, peer_;
};

// ---------------------------------------------------------------- address.cc
// A stream end as giopConnection::myaddress()/peeraddress() give it: tcp
// "giop:vipl:<ip>:<port>" (the socket's), shm "giop:vipl:127.0.0.1:<port>" (this host;
// port 0 for the connecting end), so that omniORB's transport rules match the real
// address.
std::string giop_address(const ::vipl::Address &a);

class Address : public omni::giopAddress {
public:
    Address(std::string host, uint16_t port, Transport provider);
    // Parses "<host>:<port>" (the part after "giop:vipl:"); null if malformed.
    static Address *parse(const char *param);

    const char *type() const override { return "giop:vipl"; }
    const char *address() const override { return text_.c_str(); }
    const char *host() const override { return host_.c_str(); }
    omni::giopActiveConnection *Connect(const omni_time_t &deadline, CORBA::ULong strand_flags,
                                        CORBA::Boolean &timed_out) const override;
    omni::giopAddress *duplicate() const override;
    omni::giopAddress *duplicate(const char *host) const override;
    // The common URI that reaches this address.
    Uri uri() const;

private:
    std::string host_;
    uint16_t port_;
    Transport provider_;
    std::string text_;
};

// ---------------------------------------------------------------- active.cc
class ActiveCollection : public omni::giopActiveCollection {
public:
    static ActiveCollection &singleton();
    const char *type() const override { return "giop:vipl"; }
    void Monitor(omni::giopConnection::notifyReadable_t func, void *cookie) override;
    CORBA::Boolean isEmpty() const override;
    void deactivate() override;
    const std::shared_ptr<Selector> &selector() const { return selector_; }
    void added();
    void removed();

private:
    ActiveCollection();
    std::shared_ptr<Selector> selector_;
    mutable std::mutex mu_;
    int count_ = 0;
    bool active_ = true;
};

// As omniORB's own transports: one object is both, and omniORB deletes it through the
// giopConnection when its last reference goes.
class ActiveConnection : public omni::giopActiveConnection, public Connection {
public:
    ActiveConnection(Stream stream, const std::string &myaddr, const std::string &peeraddr);
    ~ActiveConnection() override;
    omni::giopActiveCollection *registerMonitor() override;
    omni::giopConnection &getConnection() override { return *this; }

private:
    bool registered_ = false;
};

// ---------------------------------------------------------------- endpoint.cc
class Endpoint : public omni::giopEndpoint {
public:
    Endpoint(std::string host, uint16_t port, Transport provider);
    static Endpoint *parse(const char *param);
    ~Endpoint() override;

    const char *type() const override { return "giop:vipl"; }
    const char *address() const override;
    const omni::orbServer::EndpointList *addresses() const override { return &addresses_; }
    CORBA::Boolean publish(const omni::orbServer::PublishSpecs &specs, CORBA::Boolean all_specs,
                           CORBA::Boolean all_eps,
                           omni::orbServer::EndpointList &published) override;
    CORBA::Boolean Bind() override;
    omni::giopConnection *AcceptAndMonitor(omni::giopConnection::notifyReadable_t func,
                                           void *cookie) override;
    void Poke() override;
    void Shutdown() override;

private:
    void stop_accepting();

    std::string host_; // as given ("" = this host)
    uint16_t port_;    // as given (0 = any)
    Transport provider_;
    std::string bound_host_;
    uint16_t bound_port_ = 0;
    Transport bound_provider_ = Transport::shm;
    omni::orbServer::EndpointList addresses_;
    std::shared_ptr<Selector> selector_;
    // Polled by the Selector with the connections (its fd); accepted without waiting
    // when ready.  mu_ keeps Shutdown() from closing it under an accept.
    Listener listener_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> poked_{false};
    std::mutex mu_;
};

// ---------------------------------------------------------------- transport.cc
// Counters for tests and tools (vipl_omni_stats).
struct Stats {
    std::atomic<uint64_t> accepted{0};
    std::atomic<uint64_t> connected{0};
};
Stats &stats();

} // namespace vipl::orb
