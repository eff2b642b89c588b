#include "rules.h"

#include <arpa/inet.h>
#include <fnmatch.h>
#include <sys/un.h>

#include <cstddef>
#include <cstring>

namespace vipl::db {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

bool parse_port(std::string_view s, int *port) {
    if (s == "*") {
        *port = -1;
        return true;
    }
    if (s.empty() || s.size() > 5) return false;
    int v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + (c - '0');
    }
    if (v < 1 || v > 65535) return false;
    *port = v;
    return true;
}

// "<addr>[/<bits>]" with a bracketed IPv6 address.
bool parse_net(std::string_view s, Pattern *p) {
    std::string_view addr = s, bits;
    if (!s.empty() && s.front() == '[') {
        auto close = s.find(']');
        if (close == std::string_view::npos) return false;
        addr = s.substr(1, close - 1);
        std::string_view rest = s.substr(close + 1);
        if (!rest.empty()) {
            if (rest.front() != '/') return false;
            bits = rest.substr(1);
        }
        p->v6 = true;
    } else {
        auto slash = s.find('/');
        if (slash != std::string_view::npos) {
            addr = s.substr(0, slash);
            bits = s.substr(slash + 1);
        }
        p->v6 = false;
    }
    std::string a(addr);
    if (inet_pton(p->v6 ? AF_INET6 : AF_INET, a.c_str(), p->addr) != 1) return false;
    int max = p->v6 ? 128 : 32;
    p->bits = max;
    if (!bits.empty()) {
        if (bits.size() > 3) return false;
        int v = 0;
        for (char c : bits) {
            if (c < '0' || c > '9') return false;
            v = v * 10 + (c - '0');
        }
        if (v > max) return false;
        p->bits = v;
    }
    p->any_addr = false;
    return true;
}

bool parse_pattern(std::string_view s, std::vector<Pattern> *out) {
    Pattern p;
    if (s == "*") {
        p.kind = Pattern::Kind::unix_any;
        out->push_back(p);
        out->push_back(Pattern{});
        return true;
    }
    if (s == "unix") {
        p.kind = Pattern::Kind::unix_any;
        out->push_back(p);
        return true;
    }
    if (s == "tcp") {
        out->push_back(p);
        return true;
    }
    if (s.starts_with("unix:")) {
        p.kind = Pattern::Kind::unix_glob;
        p.glob = std::string(s.substr(5));
        if (p.glob.empty()) return false;
        out->push_back(p);
        return true;
    }
    if (!s.starts_with("tcp:")) return false;
    std::string_view rest = s.substr(4);
    auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) {
        if (!parse_port(rest, &p.port)) return false;
    } else {
        if (!parse_port(rest.substr(colon + 1), &p.port)) return false;
        std::string_view net = rest.substr(0, colon);
        if (net != "*" && !parse_net(net, &p)) return false;
    }
    out->push_back(p);
    return true;
}

bool prefix_match(const uint8_t *a, const uint8_t *net, int bits) {
    int whole = bits / 8;
    if (std::memcmp(a, net, whole) != 0) return false;
    int rest = bits % 8;
    if (!rest) return true;
    uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
    return (a[whole] & mask) == (net[whole] & mask);
}

} // namespace

bool Rules::parse(std::string_view text, std::string *why) {
    patterns_.clear();
    text_ = std::string(text);
    std::vector<Pattern> out;
    while (!text.empty()) {
        auto comma = text.find(',');
        std::string_view item = trim(text.substr(0, comma));
        text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
        if (item.empty() || item == "none") continue;
        if (!parse_pattern(item, &out)) {
            if (why)
                *why = "'" + std::string(item) +
                       "' is not a pattern (*, none, unix, unix:<glob>, tcp, tcp:<port>, "
                       "tcp:<addr>[/<bits>]:<port|*>)";
            return false;
        }
    }
    patterns_ = std::move(out);
    return true;
}

bool Rules::match(const sockaddr *sa, socklen_t len) const {
    if (!sa || len < static_cast<socklen_t>(sizeof(sa_family_t))) return false;
    if (sa->sa_family == AF_UNIX) {
        auto *un = reinterpret_cast<const sockaddr_un *>(sa);
        size_t n = len - offsetof(sockaddr_un, sun_path);
        if (len <= offsetof(sockaddr_un, sun_path)) n = 0;
        std::string path;
        if (n > 0 && un->sun_path[0] == '\0')
            path = "@" + std::string(un->sun_path + 1, n - 1);
        else
            path = std::string(un->sun_path, strnlen(un->sun_path, n));
        for (const Pattern &p : patterns_) {
            if (p.kind == Pattern::Kind::unix_any) return true;
            if (p.kind == Pattern::Kind::unix_glob && !path.empty() &&
                fnmatch(p.glob.c_str(), path.c_str(), 0) == 0)
                return true;
        }
        return false;
    }
    uint8_t addr[16];
    bool v6;
    int port;
    if (sa->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
        auto *in = reinterpret_cast<const sockaddr_in *>(sa);
        std::memcpy(addr, &in->sin_addr, 4);
        v6 = false;
        port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
        auto *in6 = reinterpret_cast<const sockaddr_in6 *>(sa);
        port = ntohs(in6->sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            std::memcpy(addr, in6->sin6_addr.s6_addr + 12, 4);
            v6 = false;
        } else {
            std::memcpy(addr, in6->sin6_addr.s6_addr, 16);
            v6 = true;
        }
    } else {
        return false;
    }
    for (const Pattern &p : patterns_) {
        if (p.kind != Pattern::Kind::tcp) continue;
        if (p.port >= 0 && p.port != port) continue;
        if (!p.any_addr && (p.v6 != v6 || !prefix_match(addr, p.addr, p.bits))) continue;
        return true;
    }
    return false;
}

} // namespace vipl::db
