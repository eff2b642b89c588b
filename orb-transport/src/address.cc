// giopAddress for "giop:vipl:<host>:<port>": connects a Stream.
#include "omnivipl.h"

#include <omniORB4/omniURI.h>

namespace vipl::orb {

std::string giop_address(const ::vipl::Address &a) {
    if (a.provider == Transport::tcp) {
        bool v6 = a.host.find(':') != std::string::npos;
        return "giop:vipl:" + (v6 ? "[" + a.host + "]" : a.host) + ":" + std::to_string(a.port);
    }
    // omniORB's rules read "giop:<transport>:<IPv4 address>:<port>" (a number): a
    // same-host end is at 127.0.0.1, with the listener's port, or 0 for the connecting
    // process (whose pid is in the Stream's peer_address()).
    return "giop:vipl:127.0.0.1:" + std::to_string(a.port);
}

Address::Address(std::string host, uint16_t port, Transport provider)
    : host_(std::move(host)), port_(port), provider_(provider) {
    bool v6 = host_.find(':') != std::string::npos;
    text_ = "giop:vipl:" + (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
}

Address *Address::parse(const char *param) {
    CORBA::UShort port;
    CORBA::String_var host = omni::omniURI::extractHostPort(param, port);
    if (!host.in() || !*host.in() || port == 0) return nullptr;
    return new Address(host.in(), port, options().provider);
}

Uri Address::uri() const {
    Uri u;
    u.transport = provider_;
    u.host = host_;
    u.port = port_;
    return u;
}

omni::giopActiveConnection *Address::Connect(const omni_time_t &deadline, CORBA::ULong,
                                             CORBA::Boolean &timed_out) const {
    timed_out = 0;
    int ms = ms_until(deadline);
    if (ms == 0) {
        timed_out = 1;
        return nullptr;
    }
    Deadline d = ms < 0 ? kNever : deadline_in(std::chrono::milliseconds(ms));
    std::error_code ec;
    Stream s = Stream::connect(uri(), d, ec, stream_options());
    if (ec) {
        timed_out = ec == std::errc::timed_out;
        if (omniORB::trace(20)) {
            omniORB::logger log;
            log << "vipl: connect to " << text_.c_str() << " failed: " << ec.message().c_str()
                << "\n";
        }
        return nullptr;
    }
    stats().connected.fetch_add(1, std::memory_order_relaxed);
    std::string mine = giop_address(s.local_address()), peer = giop_address(s.peer_address());
    return new ActiveConnection(std::move(s), mine, peer);
}

omni::giopAddress *Address::duplicate() const {
    return new Address(host_, port_, provider_);
}

omni::giopAddress *Address::duplicate(const char *host) const {
    return new Address(host, port_, provider_);
}

} // namespace vipl::orb
