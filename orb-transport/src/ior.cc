// The IOR component {host identity, host, port, provider} beside the IIOP address.
// omniORB's own publishing structure (IORPublish) is opaque to a plug-in, so the
// endpoints we publish are kept here and added by an encodeIOR interceptor; the
// decodeIOR interceptor turns a component this process can reach into an Address.
#include "omnivipl.h"

#include <omniORB4/IOP_S.h>
#include <omniORB4/omniIOR.h>
#include <omniORB4/omniInterceptors.h>

#include <mutex>

namespace vipl::orb {

namespace {

struct Published {
    std::string host;
    uint16_t port;
    Transport provider;
};

std::mutex g_mu;
std::vector<Published> g_published;

CORBA::Boolean encode(omni::omniInterceptors::encodeIOR_T::info_T &info) {
    const GIOP::Version &v = info.iiop.version;
    if (v.major == 1 && v.minor < 1) return 1; // no components before GIOP 1.1
    std::lock_guard lock(g_mu);
    for (const Published &p : g_published) {
        cdrEncapsulationStream s(CORBA::ULong(0), CORBA::Boolean(1));
        s.marshalRawString(host_identity().c_str());
        s.marshalRawString(p.host.c_str());
        CORBA::UShort port = p.port;
        port >>= s;
        CORBA::Octet provider = p.provider == Transport::tcp ? 1 : 0;
        s.marshalOctet(provider);
        IOP::TaggedComponent &c = omniIOR::newIIOPtaggedComponent(info.iiop.components);
        c.tag = kTagViplTransport;
        s.setOctetSeq(c.component_data);
    }
    return 1;
}

CORBA::Boolean decode(omni::omniInterceptors::decodeIOR_T::info_T &info) {
    if (!info.has_iiop_body) return 1;
    const IOP::MultipleComponentProfile &cs = info.iiop.components;
    for (CORBA::ULong i = 0; i < cs.length(); ++i) {
        if (cs[i].tag != kTagViplTransport) continue;
        try {
            cdrEncapsulationStream s(cs[i].component_data.get_buffer(),
                                     cs[i].component_data.length(), 1);
            CORBA::String_var identity = s.unmarshalRawString();
            CORBA::String_var host = s.unmarshalRawString();
            CORBA::UShort port;
            port <<= s;
            CORBA::Octet provider;
            provider = s.unmarshalOctet();
            // A shared-memory address is reachable from this kernel only.
            if (provider == 0 && host_identity() != identity.in()) continue;
            info.ior.getIORInfo()->addresses().push_back(
                new Address(host.in(), port, provider == 1 ? Transport::tcp : Transport::shm));
        } catch (...) {
            // A malformed component is ignored like an unknown one.
        }
    }
    return 1;
}

} // namespace

void publish_address(const std::string &host, uint16_t port, Transport provider) {
    std::lock_guard lock(g_mu);
    for (const Published &p : g_published)
        if (p.host == host && p.port == port) return;
    g_published.push_back({host, port, provider});
}

void install_ior_interceptors() {
    omniORB::getInterceptors()->encodeIOR.add(encode);
    omniORB::getInterceptors()->decodeIOR.add(decode);
}

void remove_ior_interceptors() {
    omniORB::getInterceptors()->encodeIOR.remove(encode);
    omniORB::getInterceptors()->decodeIOR.remove(decode);
    std::lock_guard lock(g_mu);
    g_published.clear();
}

} // namespace vipl::orb
