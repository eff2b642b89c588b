// Which sockets ride the interconnect: address patterns, as the VIPL_DB_LISTEN,
// VIPL_DB_CONNECT and VIPL_DB_REMOTE keys give them (config.h).
//
// A list is comma-separated; each pattern is one of
//   *                      every unix and TCP stream socket
//   none                   nothing (an empty list too)
//   unix                   every unix stream socket (path or abstract)
//   unix:<glob>            a unix socket whose path matches the glob (fnmatch(3)), or
//                          "@name" glob for an abstract one
//   tcp                    every TCP socket (IPv4 and IPv6)
//   tcp:<port>             any address, that port ("*" for any port)
//   tcp:<addr>[/<bits>]:<port>
//                          an IPv4 or bracketed IPv6 address or network, that port ("*":
//                          any), e.g. tcp:10.0.0.0/8:5432, tcp:[::1]:*
// An IPv4-mapped IPv6 address matches as the IPv4 address it carries.
//
// Thread rules: a parsed list is immutable and may be shared.  Not async-signal-safe.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vipl::db {

struct Pattern {
    enum class Kind : uint8_t { unix_any, unix_glob, tcp } kind = Kind::tcp;
    std::string glob;      // unix_glob
    bool any_addr = true;  // tcp: no address given
    bool v6 = false;       // tcp: the address is IPv6
    uint8_t addr[16] = {}; // tcp: network address
    int bits = 0;          // tcp: prefix length
    int port = -1;         // tcp: -1 = any
};

class Rules {
public:
    // Parses a list; false and *why on the first bad pattern (the list is then empty).
    bool parse(std::string_view text, std::string *why);
    bool empty() const { return patterns_.empty(); }
    // Whether a socket address (unix or IP, as from getsockname/getpeername) matches.
    bool match(const sockaddr *sa, socklen_t len) const;
    const std::string &text() const { return text_; }

private:
    std::vector<Pattern> patterns_;
    std::string text_;
};

} // namespace vipl::db
