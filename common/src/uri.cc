#include "vipl/uri.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <mutex>

namespace vipl {
namespace {

bool iequal(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

Uri fail(std::string_view text, const char *what, std::error_code &ec, std::string *why) {
    ec = std::make_error_code(std::errc::invalid_argument);
    if (why) *why = "vipl URI '" + std::string(text) + "': " + what;
    return {};
}

bool is_ipv4(const std::string &h) {
    in_addr a;
    return inet_pton(AF_INET, h.c_str(), &a) == 1;
}

bool is_ipv6(const std::string &h) {
    in6_addr a;
    return inet_pton(AF_INET6, h.c_str(), &a) == 1;
}

bool is_wildcard(const std::string &h) {
    return h == "0.0.0.0" || h == "::" || h == "*";
}

bool is_loopback(const std::string &h) {
    in_addr a4;
    if (inet_pton(AF_INET, h.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    return h == "::1" || iequal(h, "localhost");
}

// Host names are letters, digits, '-', '.', '_'; anything else is a typo or an attack.
bool valid_name(std::string_view h) {
    return !h.empty() && h.size() <= 253 && std::all_of(h.begin(), h.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
    });
}

} // namespace

Uri Uri::parse(std::string_view text, std::error_code &ec, std::string *why) {
    ec.clear();
    Uri u;
    size_t sep = text.find("://");
    if (sep == std::string_view::npos) return fail(text, "missing '://'", ec, why);
    std::string_view scheme = text.substr(0, sep);
    if (iequal(scheme, "vipl"))
        u.transport = Transport::automatic;
    else if (iequal(scheme, "vipl+shm"))
        u.transport = Transport::shm;
    else if (iequal(scheme, "vipl+tcp"))
        u.transport = Transport::tcp;
    else
        return fail(text, "scheme must be vipl, vipl+shm or vipl+tcp", ec, why);

    std::string_view rest = text.substr(sep + 3);
    if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    // "host/service": no host holds a '/', so the first one ends it.
    std::string_view service;
    bool has_service = false;
    if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
        service = rest.substr(slash + 1);
        rest = rest.substr(0, slash);
        has_service = true;
    }
    std::string_view port;
    bool has_port = false;
    if (!rest.empty() && rest.front() == '[') {
        size_t close = rest.find(']');
        if (close == std::string_view::npos) return fail(text, "missing ']'", ec, why);
        u.host = std::string(rest.substr(1, close - 1));
        if (!is_ipv6(u.host)) return fail(text, "not an IPv6 address inside []", ec, why);
        rest = rest.substr(close + 1);
        if (!rest.empty()) {
            if (rest.front() != ':') return fail(text, "missing port", ec, why);
            port = rest.substr(1);
            has_port = true;
        }
    } else {
        size_t colon = rest.rfind(':');
        u.host = std::string(rest.substr(0, colon));
        if (colon != std::string_view::npos) {
            port = rest.substr(colon + 1);
            has_port = true;
        }
        if (u.host.find(':') != std::string::npos)
            return fail(text, "IPv6 addresses must be bracketed ([::1]:port)", ec, why);
        if (u.host.empty()) return fail(text, "missing host", ec, why);
        if (u.host != "*" && !valid_name(u.host)) return fail(text, "invalid host", ec, why);
    }
    if (has_service) {
        if (has_port) return fail(text, "a port or a service name, not both", ec, why);
        if (!valid_service(service))
            return fail(text, "a service name is 3 to 32 letters, digits, '.', '-' or '_'", ec,
                        why);
        u.service = std::string(service);
    } else {
        if (!has_port || port.empty()) return fail(text, "missing port", ec, why);
        if (port.size() > 5 ||
            !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
            return fail(text, "port must be a decimal number 0..65535 and end the URI", ec, why);
        unsigned long p = std::stoul(std::string(port));
        if (p > 65535) return fail(text, "port out of range 0..65535", ec, why);
        u.port = static_cast<uint16_t>(p);
    }
    if (u.transport == Transport::shm && !is_wildcard(u.host) && !is_this_host(u.host))
        return fail(text, "vipl+shm needs a host naming this host", ec, why);
    return u;
}

std::string Uri::to_string() const {
    std::string s = transport == Transport::shm   ? "vipl+shm://"
                    : transport == Transport::tcp ? "vipl+tcp://"
                                                  : "vipl://";
    if (host.find(':') != std::string::npos)
        s += "[" + host + "]";
    else
        s += host;
    return service.empty() ? s + ":" + std::to_string(port) : s + "/" + service;
}

std::vector<uint8_t> Uri::discriminator() const {
    if (!service.empty()) return std::vector<uint8_t>(service.begin(), service.end());
    return {static_cast<uint8_t>(port >> 8), static_cast<uint8_t>(port & 0xff)};
}

bool valid_service(std::string_view name) {
    return name.size() >= 3 && name.size() <= 32 &&
           std::all_of(name.begin(), name.end(), [](char c) {
               return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ||
                      c == '_';
           });
}

Transport Uri::resolved() const {
    if (transport != Transport::automatic) return transport;
    return is_wildcard(host) || is_this_host(host) ? Transport::shm : Transport::tcp;
}

std::string Uri::listen_device() const {
    if (resolved() == Transport::shm) return "shm0";
    if (iequal(host, "localhost")) return "tcp:127.0.0.1";
    if (is_wildcard(host)) return "tcp0";
    if (is_ipv4(host) || is_ipv6(host)) return "tcp:" + host;
    return "tcp0";
}

std::string Uri::connect_device() const {
    if (resolved() == Transport::shm) return "shm0";
    if (host == "::1") return "tcp:::1";
    if (is_loopback(host)) return "tcp:127.0.0.1";
    return "tcp0";
}

std::string Uri::ns_name() const {
    if (resolved() == Transport::shm || is_wildcard(host)) return "localhost";
    return host;
}

bool is_this_host(std::string_view host) {
    if (iequal(host, "localhost") || host == "127.0.0.1" || host == "::1") return true;
    static std::once_flag once;
    static std::string name, canonical;
    std::call_once(once, [] {
        char buf[256] = {};
        if (gethostname(buf, sizeof buf - 1) != 0) return;
        name = buf;
        addrinfo hints{};
        hints.ai_flags = AI_CANONNAME;
        addrinfo *res = nullptr;
        if (getaddrinfo(buf, nullptr, &hints, &res) == 0 && res) {
            if (res->ai_canonname) canonical = res->ai_canonname;
            freeaddrinfo(res);
        }
    });
    return (!name.empty() && iequal(host, name)) || (!canonical.empty() && iequal(host, canonical));
}

} // namespace vipl
