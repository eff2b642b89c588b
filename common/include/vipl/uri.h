// Endpoint URIs of VI byte streams: which provider, which host, which port or service.
//
//   vipl://<host>:<port>        provider chosen by host: shm when <host> names this host
//                               (localhost, 127.0.0.1, ::1, this host's name or its
//                               fully qualified name), tcp otherwise
//   vipl+shm://<host>:<port>    always the shared-memory provider (host must be this host)
//   vipl+tcp://<host>:<port>    always the tcp provider
//   vipl[+shm|+tcp]://<host>/<service>   a service name in place of the port
//
// <host> is a name, an IPv4 address or a bracketed IPv6 address ("[::1]"); <port> is a
// decimal number 0..65535 (0: any free port, for Listener::bind only); <service> is 3 to
// 32 letters, digits, '.', '-' or '_'.  The scheme is case-insensitive; nothing may follow
// the port or the service (a single trailing '/' is tolerated).
//
// Port -> VIPL discriminator: the port's two bytes, big-endian (port 5432 ->
// {0x15, 0x38}).  The tcp provider reads a two-byte discriminator as its TCP port, so
// `vipl+tcp://h:5432` listens on TCP port 5432; the shm provider uses the same two bytes
// as its (host-local) discriminator.  A service name is the discriminator itself (its
// bytes): an opaque rendezvous name, which the tcp provider hashes to a TCP port of its
// configured range (TCP_PORT_BASE, TCP_PORT_RANGE).  Never two bytes, so a service name
// never reads as a port.
//
// Thread and signal rules: every function here is thread-safe; none is
// async-signal-safe (they allocate; is_this_host() may consult the resolver once).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace vipl {

enum class Transport {
    automatic, // "vipl://": shm for this host, tcp for others
    shm,       // "vipl+shm://"
    tcp,       // "vipl+tcp://"
};

struct Uri {
    Transport transport = Transport::automatic;
    std::string host; // without brackets ("::1", not "[::1]")
    uint16_t port = 0;
    // A service name in place of the port (port is then ignored); empty: the port.
    std::string service;

    // Parses `text`.  On failure returns an empty Uri, sets ec to
    // std::errc::invalid_argument and, when `why` is given, stores a sentence saying what
    // is wrong ("vipl URI 'x': missing port").  On success clears ec.
    static Uri parse(std::string_view text, std::error_code &ec, std::string *why = nullptr);

    // The canonical text: "vipl+tcp://[::1]:80", "vipl+shm://localhost/pg-5432-7";
    // automatic URIs keep "vipl://".
    std::string to_string() const;

    // The provider actually used: transport, or for automatic the result of is_this_host().
    Transport resolved() const;

    // The VIPL discriminator: the service name's bytes, else the port's two bytes,
    // big-endian.
    std::vector<uint8_t> discriminator() const;
    // Whether the URI names a rendezvous: a service, or a port other than 0.
    bool has_discriminator() const { return !service.empty() || port != 0; }

    // The VIPL device to open to listen on this URI: "shm0"; for tcp "tcp:<address>" for
    // an IP literal, "tcp:127.0.0.1" for localhost, "tcp0" (the primary interface) for
    // "0.0.0.0", "::", "*" or a host name.
    std::string listen_device() const;

    // The VIPL device to open to connect to this URI: "shm0"; for tcp a loopback device
    // ("tcp:127.0.0.1" / "tcp:::1") when the host is a loopback address or localhost,
    // else "tcp0".  (A loopback tcp NIC reaches only loopback NICs.)
    std::string connect_device() const;

    // The name given to VipNSGetHostByName: the host, or "localhost" for wildcards and shm.
    std::string ns_name() const;

    bool operator==(const Uri &) const = default;
};

// Whether `name` is a valid service name (3 to 32 of [A-Za-z0-9._-]).
bool valid_service(std::string_view name);

// True when `host` names this host: localhost, 127.0.0.1, ::1, gethostname() or the
// canonical (fully qualified) name of it.  Case-insensitive for names.
bool is_this_host(std::string_view host);

} // namespace vipl
