// Endpoint URIs of VI byte streams: which provider, which host, which port.
//
//   vipl://<host>:<port>        provider chosen by host: shm when <host> names this host
//                               (localhost, 127.0.0.1, ::1, this host's name or its
//                               fully qualified name), tcp otherwise
//   vipl+shm://<host>:<port>    always the shared-memory provider (host must be this host)
//   vipl+tcp://<host>:<port>    always the tcp provider
//
// <host> is a name, an IPv4 address or a bracketed IPv6 address ("[::1]"); <port> is a
// decimal number 1..65535.  The scheme is case-insensitive; nothing may follow the port
// (a single trailing '/' is tolerated).
//
// Port -> VIPL discriminator: the port's two bytes, big-endian (port 5432 ->
// {0x15, 0x38}).  The tcp provider reads a two-byte discriminator as its TCP port, so
// `vipl+tcp://h:5432` listens on TCP port 5432; the shm provider uses the same two bytes
// as its (host-local) discriminator.
//
// Thread and signal rules: every function here is thread-safe; none is
// async-signal-safe (they allocate; is_this_host() may consult the resolver once).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

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

    // Parses `text`.  On failure returns an empty Uri, sets ec to
    // std::errc::invalid_argument and, when `why` is given, stores a sentence saying what
    // is wrong ("vipl URI 'x': missing port").  On success clears ec.
    static Uri parse(std::string_view text, std::error_code &ec, std::string *why = nullptr);

    // The canonical text: "vipl+tcp://[::1]:80"; automatic URIs keep "vipl://".
    std::string to_string() const;

    // The provider actually used: transport, or for automatic the result of is_this_host().
    Transport resolved() const;

    // The VIPL discriminator for the port: two bytes, big-endian.
    std::array<uint8_t, 2> discriminator() const {
        return {static_cast<uint8_t>(port >> 8), static_cast<uint8_t>(port & 0xff)};
    }

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

// True when `host` names this host: localhost, 127.0.0.1, ::1, gethostname() or the
// canonical (fully qualified) name of it.  Case-insensitive for names.
bool is_this_host(std::string_view host);

} // namespace vipl
