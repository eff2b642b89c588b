// giopTransportImpl "giop:vipl" and the module initialiser: registers the option
// handlers when the library loads; at the end of ORB_init installs the IOR interceptors
// and, when the transport rules are still omniORB's defaults, puts vipl first.
#include "omnivipl.h"
#include "vipl/omnivipl.h"

#include <initialiser.h>
#include <objectAdapter.h>
#include <omniORB4/omniIOR.h>
#include <omniORB4/omniURI.h>
#include <transportRules.h>

#include <cstring>

namespace vipl::orb {

Stats &stats() {
    static Stats s;
    return s;
}

namespace {

bool g_iiop_host_added = false;

// True when the server listens on a transport that publishes an IIOP address itself.
bool other_iiop_endpoint() {
    auto &eps = omni::omniObjAdapter::options.endpoints;
    if (eps.empty()) return true; // omniORB's default endpoint is giop:tcp
    for (auto *ep : eps)
        if (strncmp(ep->uri, "giop:vipl:", 10) != 0) return true;
    return false;
}

class TransportImpl : public omni::giopTransportImpl {
public:
    TransportImpl() : omni::giopTransportImpl("giop:vipl") {}

    omni::giopEndpoint *toEndpoint(const char *param) override { return Endpoint::parse(param); }

    omni::giopAddress *toAddress(const char *param) override { return Address::parse(param); }

    CORBA::Boolean isValid(const char *param) override {
        return omni::omniURI::validHostPort(param) || omni::omniURI::validHostPortRange(param);
    }

    CORBA::Boolean addToIOR(const char *param, omni::IORPublish *eps) override {
        std::unique_ptr<Address> a(Address::parse(param));
        if (!a) return 0;
        publish_address(a->host(), a->uri().port, a->uri().resolved());
        // IORs need an IIOP host; a vipl-only server publishes this host with port 0,
        // which a client without the plug-in cannot reach (TRANSIENT), as giop:unix does.
        if (!g_iiop_host_added && !other_iiop_endpoint()) {
            g_iiop_host_added = true;
            IIOP::Address addr;
            addr.host = host_name().c_str();
            addr.port = 0;
            omniIOR::add_IIOP_ADDRESS(addr, eps);
        }
        return 1;
    }

    const omnivector<const char *> *getInterfaceAddress() override {
        return giopTransportImpl::getInterfaceAddress("giop:tcp");
    }
};

class MatchAll : public omni::transportRules::Rule {
public:
    MatchAll() : Rule("*") {}
    CORBA::Boolean match(const char *) override { return 1; }
};

// omniORB's default rule filters out transports it does not name; replace it (and only
// it) by the same rule with vipl first.
void prefer_vipl(omni::transportRules &rules) {
    CORBA::String_var first = rules.dumpRule(0);
    CORBA::String_var second = rules.dumpRule(1);
    if (!first.in() || second.in() || strcmp(first.in(), "* unix,ssl,tcp") != 0) return;
    rules.reset();
    CORBA::StringSeq actions;
    actions.length(4);
    actions[0] = "vipl";
    actions[1] = "unix";
    actions[2] = "ssl";
    actions[3] = "tcp";
    rules.addRule(new MatchAll, actions);
}

class Initialiser : public omni::omniInitialiser {
public:
    Initialiser() {
        register_option_handlers();
        transport_ = new TransportImpl; // joins omniORB's list of transports
        omni::omniInitialiser::install(this);
    }

    void attach() override {
        install_ior_interceptors();
        prefer_vipl(omni::transportRules::clientRules());
        prefer_vipl(omni::transportRules::serverRules());
        if (omniORB::trace(10)) {
            omniORB::logger log;
            CORBA::String_var rule = omni::transportRules::clientRules().dumpRule(0);
            log << "vipl: transport loaded, client rule '" << (rule.in() ? rule.in() : "") << "'\n";
        }
    }

    void detach() override {
        remove_ior_interceptors();
        g_iiop_host_added = false;
    }

private:
    TransportImpl *transport_; // lives as long as the process, as omniORB's own
};

Initialiser g_initialiser;

} // namespace
} // namespace vipl::orb

extern "C" void vipl_omni_get_stats(struct vipl_omni_stats *out) {
    out->accepted = vipl::orb::stats().accepted.load();
    out->connected = vipl::orb::stats().connected.load();
}

extern "C" int vipl_omni_version(void) {
    return 100; // 0.1.0
}
