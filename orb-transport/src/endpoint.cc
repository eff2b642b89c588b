// giopEndpoint for "giop:vipl:<host>:<port>": a Listener, whose descriptor the Selector
// polls with the accepted connections; a ready listener is accepted from without
// waiting, on omniORB's own thread (no thread of ours).
#include "omnivipl.h"

#include <objectAdapter.h>
#include <omniORB4/omniURI.h>

#include <thread>

namespace vipl::orb {

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

    u.port = port_; // 0: the listener picks a free one
    std::error_code ec;
    Listener l = Listener::bind(u, ec, stream_options());
    {
        std::lock_guard lock(mu_);
        listener_ = std::move(l);
    }
    if (!listener_.is_open()) {
        if (omniORB::trace(1)) {
            omniORB::logger log;
            log << "vipl: cannot bind " << u.to_string().c_str() << ": " << ec.message().c_str()
                << "\n";
        }
        return 0;
    }
    bound_port_ = listener_.uri().port;
    bound_host_ = host_.empty() || host_ == "0.0.0.0" || host_ == "::" ? host_name() : host_;
    bound_provider_ = resolved;
    addresses_.length(1);
    addresses_[0] = Address(bound_host_, bound_port_, resolved).address();

    stop_ = false;
    if (omniORB::trace(10)) {
        omniORB::logger log;
        log << "vipl: listening on " << address() << " (" << provider_name(resolved) << ")\n";
    }
    return 1;
}

void Endpoint::stop_accepting() {
    stop_.store(true, std::memory_order_release);
    std::lock_guard lock(mu_);
    listener_ = Listener();
}

omni::giopConnection *Endpoint::AcceptAndMonitor(omni::giopConnection::notifyReadable_t func,
                                                 void *cookie) {
    for (;;) {
        if (poked_.exchange(false) || stop_.load(std::memory_order_acquire)) return nullptr;
        int fd;
        {
            std::lock_guard lock(mu_);
            fd = listener_.fd();
        }
        if (fd < 0 || !selector_->select(func, cookie, fd)) continue;
        // The listener's fd is ready: take what is there without waiting (a wake-up for a
        // request still on its way finds none, and the fd stays quiet until it comes).
        Stream s;
        std::error_code ec;
        {
            std::lock_guard lock(mu_);
            if (!stop_.load(std::memory_order_acquire)) s = listener_.accept(Deadline{}, ec);
        }
        if (!s) {
            if (ec && ec != std::errc::timed_out && ec != std::errc::interrupted) {
                // A listener that cannot accept (no descriptor left) stays ready: do not spin.
                if (omniORB::trace(10)) {
                    omniORB::logger log;
                    log << "vipl: accept on " << address() << ": " << ec.message().c_str() << "\n";
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            continue;
        }
        stats().accepted.fetch_add(1, std::memory_order_relaxed);
        std::string mine = giop_address(s.local_address()), peer = giop_address(s.peer_address());
        return new Connection(std::move(s), selector_, mine, peer);
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
