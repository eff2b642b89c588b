// The tcp provider's resolver: numeric addresses, /etc/hosts, then DNS over
// UDP to the servers /etc/resolv.conf names.  The system resolver is not
// used because it retries its waits after a signal: a lookup made with it
// could not return VIP_INTERRUPTED.
#include "core/clock.h"
#include "core/random.h"
#include "core/wait.h"
#include "prov/tcp/tcp.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <random>
#include <string>
#include <string_view>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace vipl::tcp {
namespace {

constexpr uint16_t kTypeA = 1, kTypePtr = 12, kTypeAaaa = 28;

struct ResolvConf {
    std::vector<sockaddr_storage> servers;
    std::vector<std::string> search;
    int timeout_s = 5;
    int attempts = 2;
    int ndots = 1;
};

sockaddr_storage make_addr(int family, const void *bytes, uint16_t port) {
    sockaddr_storage ss{};
    if (family == AF_INET) {
        auto *s = reinterpret_cast<sockaddr_in *>(&ss);
        s->sin_family = AF_INET;
        s->sin_port = htons(port);
        memcpy(&s->sin_addr, bytes, 4);
    } else {
        auto *s = reinterpret_cast<sockaddr_in6 *>(&ss);
        s->sin6_family = AF_INET6;
        s->sin6_port = htons(port);
        memcpy(&s->sin6_addr, bytes, 16);
    }
    return ss;
}

bool parse_numeric(const std::string &text, sockaddr_storage *out) {
    uint8_t b[16];
    if (inet_pton(AF_INET, text.c_str(), b) == 1) {
        *out = make_addr(AF_INET, b, 0);
        return true;
    }
    std::string t = text.substr(0, text.find('%')); // a scope suffix names no address
    if (inet_pton(AF_INET6, t.c_str(), b) == 1) {
        *out = make_addr(AF_INET6, b, 0);
        return true;
    }
    return false;
}

// Calls f with the whitespace-separated words of each line of `path` (up to the first of
// the `comment` characters) that has any, until f returns false.  C stdio, not iostreams:
// a library linked with its own copy of the C++ runtime would carry all of its locales.
template <class F>
void for_each_line_words(const char *path, const char *comment, F &&f) {
    FILE *fp = fopen(path, "re");
    if (!fp) return;
    constexpr const char *kSpace = " \t\r\n\v\f";
    char *buf = nullptr;
    size_t cap = 0;
    ssize_t n;
    std::vector<std::string> words;
    while ((n = getline(&buf, &cap, fp)) >= 0) {
        std::string_view line(buf, static_cast<size_t>(n));
        line = line.substr(0, line.find_first_of(comment));
        words.clear();
        for (size_t i = line.find_first_not_of(kSpace); i != std::string_view::npos;
             i = line.find_first_not_of(kSpace, i)) {
            size_t j = std::min(line.find_first_of(kSpace, i), line.size());
            words.emplace_back(line.substr(i, j - i));
            i = j;
        }
        if (!words.empty() && !f(words)) break;
    }
    free(buf);
    fclose(fp);
}

ResolvConf read_resolv_conf() {
    ResolvConf rc;
    for_each_line_words("/etc/resolv.conf", "#;", [&](const std::vector<std::string> &w) {
        const std::string &key = w[0];
        if (key == "nameserver" && w.size() > 1) {
            sockaddr_storage ss;
            if (parse_numeric(w[1], &ss)) {
                reinterpret_cast<sockaddr_in *>(&ss)->sin_port = htons(53); // same place in both
                rc.servers.push_back(ss);
            }
        } else if (key == "search" || key == "domain") {
            rc.search.assign(w.begin() + 1, w.end());
        } else if (key == "options") {
            for (size_t i = 1; i < w.size(); ++i) {
                int n;
                if (sscanf(w[i].c_str(), "timeout:%d", &n) == 1)
                    rc.timeout_s = std::clamp(n, 1, 30);
                if (sscanf(w[i].c_str(), "attempts:%d", &n) == 1) rc.attempts = std::clamp(n, 1, 5);
                if (sscanf(w[i].c_str(), "ndots:%d", &n) == 1) rc.ndots = std::clamp(n, 0, 15);
            }
        }
        return true;
    });
    if (rc.servers.empty()) { // as the system resolver: the local server
        uint8_t lo[4] = {127, 0, 0, 1};
        rc.servers.push_back(make_addr(AF_INET, lo, 53));
    }
    return rc;
}

// /etc/hosts: the addresses of `name`, or (name empty) the first name of `addr`.
void read_hosts(const std::string &name, std::vector<sockaddr_storage> *addrs,
                const sockaddr_storage *addr, std::string *found) {
    for_each_line_words("/etc/hosts", "#", [&](const std::vector<std::string> &w) {
        sockaddr_storage ss;
        if (!parse_numeric(w[0], &ss)) return true;
        if (addr) {
            if (ss.ss_family == addr->ss_family && w.size() > 1 && !memcmp(&ss, addr, sizeof ss)) {
                *found = w[1];
                return false;
            }
            return true;
        }
        for (size_t i = 1; i < w.size(); ++i)
            if (!strcasecmp(w[i].c_str(), name.c_str())) {
                addrs->push_back(ss);
                break;
            }
        return true;
    });
}

// ----------------------------------------------------------------- DNS

void put16(std::vector<uint8_t> &m, uint16_t v) {
    m.push_back(static_cast<uint8_t>(v >> 8));
    m.push_back(static_cast<uint8_t>(v));
}

bool make_query(uint16_t id, const std::string &name, uint16_t type, std::vector<uint8_t> *out) {
    std::vector<uint8_t> &m = *out;
    m.clear();
    put16(m, id);
    put16(m, 0x0100); // recursion desired
    put16(m, 1);      // one question
    put16(m, 0);
    put16(m, 0);
    put16(m, 0);
    size_t start = 0;
    while (start < name.size()) {
        size_t dot = name.find('.', start);
        if (dot == std::string::npos) dot = name.size();
        size_t len = dot - start;
        if (len == 0 || len > 63) return false;
        m.push_back(static_cast<uint8_t>(len));
        m.insert(m.end(), name.begin() + start, name.begin() + dot);
        start = dot + 1;
    }
    m.push_back(0);
    put16(m, type);
    put16(m, 1); // class IN
    return m.size() <= 512;
}

uint16_t get16(const uint8_t *p) {
    return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

// Reads a (possibly compressed) name at *pos; false when malformed.
bool read_name(const uint8_t *m, size_t len, size_t *pos, std::string *out) {
    size_t p = *pos;
    bool jumped = false;
    for (int hops = 0; hops < 64; ++hops) {
        if (p >= len) return false;
        uint8_t l = m[p];
        if (l == 0) {
            if (!jumped) *pos = p + 1;
            return true;
        }
        if ((l & 0xC0) == 0xC0) {
            if (p + 1 >= len) return false;
            if (!jumped) *pos = p + 2;
            jumped = true;
            p = get16(m + p) & 0x3FFF;
            continue;
        }
        if (l > 63 || p + 1 + l > len) return false;
        if (out) {
            if (!out->empty()) out->push_back('.');
            out->append(reinterpret_cast<const char *>(m + p + 1), l);
        }
        p += 1 + l;
    }
    return false;
}

enum class Answer { records, no_name, failed, malformed };

// The records of `type` in a response to query `id`.
Answer parse_response(const uint8_t *m, size_t len, uint16_t id, uint16_t type,
                      std::vector<sockaddr_storage> *addrs, std::string *ptr) {
    if (len < 12 || get16(m) != id || !(m[2] & 0x80)) return Answer::malformed;
    int rcode = m[3] & 0xF;
    if (rcode == 3) return Answer::no_name;
    if (rcode != 0) return Answer::failed;
    size_t pos = 12;
    for (int q = get16(m + 4); q > 0; --q) {
        if (!read_name(m, len, &pos, nullptr) || pos + 4 > len) return Answer::malformed;
        pos += 4;
    }
    bool any = false;
    for (int a = get16(m + 6); a > 0; --a) {
        if (!read_name(m, len, &pos, nullptr) || pos + 10 > len) return Answer::malformed;
        uint16_t t = get16(m + pos), rdlen = get16(m + pos + 8);
        pos += 10;
        if (pos + rdlen > len) return Answer::malformed;
        if (t == type && type == kTypeA && rdlen == 4) {
            addrs->push_back(make_addr(AF_INET, m + pos, 0));
            any = true;
        } else if (t == type && type == kTypeAaaa && rdlen == 16) {
            addrs->push_back(make_addr(AF_INET6, m + pos, 0));
            any = true;
        } else if (t == type && type == kTypePtr && ptr->empty()) {
            size_t p = pos;
            if (read_name(m, len, &p, ptr)) any = true;
        }
        pos += rdlen;
    }
    return any ? Answer::records : Answer::no_name;
}

// Asks the servers for the records of each type of `name`; interruptible.
VIP_RETURN ask(const ResolvConf &rc, const std::string &name, const std::vector<uint16_t> &types,
               std::vector<sockaddr_storage> *addrs, std::string *ptr) {
    static thread_local std::minstd_rand rng(static_cast<uint32_t>(random_u64()));
    for (int attempt = 0; attempt < rc.attempts; ++attempt)
        for (const sockaddr_storage &server : rc.servers) {
            int fd = socket(server.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (fd < 0) return VIP_ERROR_NAMESERVICE;
            socklen_t sl = server.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
            std::vector<uint16_t> ids, waiting;
            bool sent = connect(fd, reinterpret_cast<const sockaddr *>(&server), sl) == 0;
            for (uint16_t type : types) {
                std::vector<uint8_t> q;
                uint16_t id = static_cast<uint16_t>(rng());
                if (!make_query(id, name, type, &q)) {
                    close(fd);
                    return VIP_ERROR_NAMESERVICE;
                }
                sent = sent && send(fd, q.data(), q.size(), 0) == static_cast<ssize_t>(q.size());
                ids.push_back(id);
                waiting.push_back(type);
            }
            uint64_t deadline = now_ns() + static_cast<uint64_t>(rc.timeout_s) * 1000000000ull;
            bool no_name = false, answered = false;
            while (sent && !waiting.empty()) {
                pollfd p{fd, POLLIN, 0};
                PollResult pr = poll_until(&p, 1, deadline);
                if (pr == PollResult::interrupted) {
                    close(fd);
                    return VIP_INTERRUPTED;
                }
                if (pr != PollResult::ready) break;
                uint8_t buf[1500];
                ssize_t n = recv(fd, buf, sizeof buf, 0);
                if (n < 0) {
                    if (errno == EAGAIN || errno == EINTR) continue;
                    break; // refused: the next server
                }
                for (size_t i = 0; i < waiting.size(); ++i) {
                    Answer a =
                        parse_response(buf, static_cast<size_t>(n), ids[i], waiting[i], addrs, ptr);
                    if (a == Answer::malformed) continue;
                    answered = true;
                    no_name |= a == Answer::no_name;
                    ids.erase(ids.begin() + static_cast<long>(i));
                    waiting.erase(waiting.begin() + static_cast<long>(i));
                    break;
                }
            }
            close(fd);
            if (!addrs->empty() || !ptr->empty()) return VIP_SUCCESS;
            if (answered && no_name && waiting.empty()) return VIP_ERROR_NAMESERVICE;
        }
    return VIP_ERROR_NAMESERVICE;
}

} // namespace

VIP_RETURN resolve_name(const char *name, int family, std::vector<sockaddr_storage> *out) {
    std::string n = name;
    if (!n.empty() && n.back() == '.') n.pop_back();
    sockaddr_storage ss;
    if (parse_numeric(n, &ss)) {
        out->push_back(ss);
        return VIP_SUCCESS;
    }
    if (n.empty() || n.size() > 253) return VIP_ERROR_NAMESERVICE;
    read_hosts(n, out, nullptr, nullptr);
    if (!out->empty()) return VIP_SUCCESS;
    if (!strcasecmp(n.c_str(), "localhost")) {
        uint8_t lo[4] = {127, 0, 0, 1};
        out->push_back(make_addr(AF_INET, lo, 0));
        return VIP_SUCCESS;
    }
    ResolvConf rc = read_resolv_conf();
    std::vector<uint16_t> types;
    if (family != AF_INET6) types.push_back(kTypeA);
    if (family != AF_INET) types.push_back(kTypeAaaa);
    std::vector<std::string> candidates;
    long dots = std::count(n.begin(), n.end(), '.');
    if (dots >= rc.ndots) candidates.push_back(n);
    for (const std::string &d : rc.search) candidates.push_back(n + "." + d);
    if (dots < rc.ndots) candidates.push_back(n);
    std::string unused;
    for (const std::string &c : candidates) {
        VIP_RETURN r = ask(rc, c, types, out, &unused);
        if (r == VIP_INTERRUPTED || r == VIP_SUCCESS) return r;
    }
    return VIP_ERROR_NAMESERVICE;
}

VIP_RETURN resolve_addr(const sockaddr_storage &addr, std::string *name) {
    read_hosts({}, nullptr, &addr, name);
    if (!name->empty()) return VIP_SUCCESS;
    char q[80];
    if (addr.ss_family == AF_INET) {
        auto *b = reinterpret_cast<const uint8_t *>(
            &reinterpret_cast<const sockaddr_in *>(&addr)->sin_addr);
        snprintf(q, sizeof q, "%u.%u.%u.%u.in-addr.arpa", b[3], b[2], b[1], b[0]);
    } else {
        auto *b = reinterpret_cast<const uint8_t *>(
            &reinterpret_cast<const sockaddr_in6 *>(&addr)->sin6_addr);
        char *p = q;
        for (int i = 15; i >= 0; --i) p += sprintf(p, "%x.%x.", b[i] & 0xF, b[i] >> 4);
        strcpy(p, "ip6.arpa");
    }
    std::vector<sockaddr_storage> unused;
    return ask(read_resolv_conf(), q, {kTypePtr}, &unused, name);
}

} // namespace vipl::tcp
