// giopEndpoint for "giop:vipl:<host>:<port>": a Listener, a thread that accepts on it
// (libvipl has no descriptor that shows a waiting connection request), and the
// Selector that watches the accepted connections.
#include "omnivipl.h"

#include <objectAdapter.h>
#include <omniORB4/omniURI.h>

#include <poll.h>
#include <random>
#include <sys/eventfd.h>
#include <unistd.h>

namespace vipl::orb {

namespace {
// Port 0 picks a free discriminator in this range (also TCP ports for the tcp provider).
constexpr uint16_t kAnyFirst = 20000, kAnyLast = 60999;
constexpr int kAnyTries = 64;
} // namespace

Endpoint::Endpoint(std::string host, uint16_t port, Transport provider)
    : host_(std::move(host)), port_(port), provider_(provider),
      selector_(std::make_shared<Selector>()) {}

Endpoint *Endpoint::parse(const char *param) {
    CORBA::UShort lo = 0, hi = 0;
    CORBA::String_var host = omni::omniURI::extractHostPortRange(param, lo, hi);
    if (!host.in()) return nullptr;
    if (lo != hi) return nullptr; // one port, or 0 for any
    return new Endpoint(host.in(), lo, options().provider);
}

Endpoint::~Endpoint() {
    stop_accepting();
    if (accept_fd_ >= 0) close(accept_fd_);
}

const char *Endpoint::address() const {
    return addresses_.length() ? static_cast<const char *>(addresses_[0]) : "giop:vipl:";
}

CORBA::Boolean Endpoint::Bind() {
    Uri u;
    u.transport = provider_;
    if (!host_.empty())
        u.host = host_;
    else
        u.host = provider_ == Transport::tcp ? "0.0.0.0" : host_name();
    Transport resolved = u.resolved();

    std::error_code ec;
    if (port_) {
        u.port = port_;
        listener_ = Listener::bind(u, ec, stream_options());
    } else {
        std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
        std::uniform_int_distribution<int> pick(kAnyFirst, kAnyLast);
        for (int i = 0; i < kAnyTries && !listener_.is_open(); ++i) {
            u.port = static_cast<uint16_t>(pick(rng));
            listener_ = Listener::bind(u, ec, stream_options());
        }
    }
    if (!listener_.is_open()) {
        if (omniORB::trace(1)) {
            omniORB::logger log;
            log << "vipl: cannot bind " << u.to_string().c_str() << ": " << ec.message().c_str()
                << "\n";
        }
        return 0;
    }
    bound_port_ = u.port;
    bound_host_ = host_.empty() || host_ == "0.0.0.0" || host_ == "::" ? host_name() : host_;
    bound_provider_ = resolved;
    addresses_.length(1);
    addresses_[0] = Address(bound_host_, bound_port_, resolved).address();

    accept_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    stop_ = false;
    acceptor_ = std::thread([this] { accept_loop(); });
    if (omniORB::trace(10)) {
        omniORB::logger log;
        log << "vipl: listening on " << address() << " (" << provider_name(resolved) << ")\n";
    }
    return 1;
}

void Endpoint::accept_loop() {
    while (!stop_.load(std::memory_order_acquire)) {
        std::error_code ec;
        Stream s = listener_.accept(deadline_in(std::chrono::milliseconds(100)), ec);
        if (s) {
            stats().accepted.fetch_add(1, std::memory_order_relaxed);
            std::lock_guard lock(mu_);
            accepted_.push_back(std::move(s));
            uint64_t one = 1;
            [[maybe_unused]] ssize_t n = write(accept_fd_, &one, sizeof one);
        } else if (ec != std::errc::timed_out && ec != std::errc::interrupted) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
}

void Endpoint::stop_accepting() {
    stop_.store(true, std::memory_order_release);
    if (acceptor_.joinable()) acceptor_.join();
    listener_ = Listener();
    std::lock_guard lock(mu_);
    for (Stream &s : accepted_) s.abort();
    accepted_.clear();
}

omni::giopConnection *Endpoint::AcceptAndMonitor(omni::giopConnection::notifyReadable_t func,
                                                 void *cookie) {
    static std::atomic<uint64_t> serial{0};
    for (;;) {
        {
            std::lock_guard lock(mu_);
            if (!accepted_.empty()) {
                Stream s = std::move(accepted_.front());
                accepted_.pop_front();
                if (accepted_.empty()) {
                    uint64_t v;
                    [[maybe_unused]] ssize_t n = read(accept_fd_, &v, sizeof v);
                }
                // The peer's own address is not known to a VI; shm peers are on this host.
                std::string peer = std::string("giop:vipl:") +
                                   (bound_provider_ == Transport::shm ? "127.0.0.1" : "0.0.0.0") +
                                   ":" + std::to_string(++serial);
                return new Connection(std::move(s), selector_, address(), peer);
            }
        }
        if (poked_.exchange(false) || stop_.load(std::memory_order_acquire)) return nullptr;
        selector_->select(func, cookie, accept_fd_);
    }
}

void Endpoint::Poke() {
    poked_ = true;
    selector_->wake();
}

void Endpoint::Shutdown() {
    stop_accepting();
    selector_->wake();
    omniORB::logs(20, "vipl: endpoint shut down.");
}

namespace {

bool spec_means_our_address(const char *spec) {
    for (const char *s : {"addr", "name", "hostname", "fqdn", "ipv4", "ipv6"})
        if (omni::strMatch(spec, s)) return true;
    return false;
}

} // namespace

CORBA::Boolean Endpoint::publish(const omni::orbServer::PublishSpecs &specs,
                                 CORBA::Boolean all_specs, CORBA::Boolean all_eps,
                                 omni::orbServer::EndpointList &published) {
    CORBA::Boolean result = 0;
    for (CORBA::ULong j = 0; j < specs.length(); ++j) {
        const char *spec = specs[j];
        std::string to_add;
        if (!strncmp(spec, "giop:vipl:", 10)) {
            to_add = strlen(spec) > 10 ? spec : address();
        } else if (no_publish() || !spec_means_our_address(spec)) {
            continue;
        } else {
            to_add = address();
        }
        if (to_add == address()) publish_address(bound_host_, bound_port_, bound_provider_);
        if (!omni::omniObjAdapter::endpointInList(to_add.c_str(), published)) {
            omni::giopEndpoint::addToIOR(to_add.c_str());
            published.length(published.length() + 1);
            published[published.length() - 1] = CORBA::string_dup(to_add.c_str());
        }
        result = 1;
        if (!all_specs) break;
    }
    return result;
}

} // namespace vipl::orb
