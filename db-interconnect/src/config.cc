#include "config.h"

#include <cstdlib>
#include <cstring>
#include <string_view>

extern char **environ;

namespace vipl::db {

namespace {

// One row per key; `field` finds the member it sets.
struct Row {
    ConfigKey key;
    uint32_t Config::*u32 = nullptr;
    bool Config::*flag = nullptr;
    Rules Config::*rules = nullptr;
};

const Row kRows[] = {
    {{"DB_ENABLE", "bool", "1", 0, 1,
      "0 passes every call straight to the kernel (the interposer stays loaded, inert)"},
     nullptr,
     &Config::enable},
    {{"DB_LISTEN", "rules", "*", 0, 0,
      "listening sockets whose clients may ride vipl (patterns: *, none, unix, unix:<glob>, "
      "tcp, tcp:<port>, tcp:<addr>[/<bits>]:<port>)"},
     nullptr,
     nullptr,
     &Config::listen},
    {{"DB_CONNECT", "rules", "*", 0, 0,
      "same-host destinations a client tries; only those whose server publishes a marker "
      "(runs the interconnect) are used"},
     nullptr,
     nullptr,
     &Config::connect},
    {{"DB_REMOTE", "rules", "none", 0, 0,
      "destinations on other hosts that run the interconnect (the tcp provider); a client "
      "writes its hello to these without further proof, so name only such servers"},
     nullptr,
     nullptr,
     &Config::remote},
    {{"DB_SPIN_US", "u32", "20", 0, 1000000,
      "microseconds a waiter polls its streams before sleeping (the base of libvipl's "
      "adaptive spin policy; 0: never spin)"},
     &Config::spin_us},
    {{"DB_BUFFER_SIZE", "u32", "32768", 512, 16 * 1024 * 1024,
      "payload bytes of each stream buffer (the connecting side's value wins); with "
      "DB_RECV_BUFFERS it bounds the bytes in flight, which must fit the shm ring "
      "(VIPL_SHM_RING_SIZE, made 1 MiB unless set) for a writer never to be needed again"},
     &Config::buffer_size},
    {{"DB_RECV_BUFFERS", "u32", "16", 1, 1024, "receive buffers (credits) per connection"},
     &Config::recv_buffers},
    {{"DB_SEND_BUFFERS", "u32", "16", 1, 1024, "send buffers per connection"},
     &Config::send_buffers},
    {{"DB_INLINE", "bool", "1", 0, 1,
      "1: a send with nothing queued before it goes from the caller's buffer straight into "
      "the shm ring (libvipl's inline send); 0: through the connection's send buffers"},
     nullptr,
     &Config::inline_sends},
    {{"DB_ONE_CPU", "bool", "0", 0, 1,
      "1: ride vipl also when client and server may run only on one and the same CPU; 0: "
      "such a connection stays on the kernel socket, which is faster there (no end can "
      "poll while the other runs); either end's 1 decides"},
     nullptr,
     &Config::one_cpu},
    {{"DB_LINGER_MS", "u32", "5000", 0, 600000,
      "how long the last close of a connection waits for the peer to take what was written"},
     &Config::linger_ms},
    {{"DB_NEGOTIATE_MS", "u32", "2000", 10, 600000,
      "how long one step of the negotiation on a new connection may wait for the peer "
      "before the connection stays on the kernel"},
     &Config::negotiate_ms},
    {{"DB_LOG", "u32", "0", 0, 2,
      "standard-error logging: 0 errors, 1 also fallbacks and warnings, 2 also every "
      "connection"},
     &Config::log},
};

struct Loaded {
    Config cfg;
    std::vector<std::string> problems;
    ConfigKey keys[std::size(kRows)];
};

bool parse_u32(std::string_view v, uint64_t min, uint64_t max, uint32_t *out) {
    if (v.empty() || v.size() > 10) return false;
    uint64_t x = 0;
    for (char c : v) {
        if (c < '0' || c > '9') return false;
        x = x * 10 + static_cast<uint64_t>(c - '0');
    }
    if (x < min || x > max) return false;
    *out = static_cast<uint32_t>(x);
    return true;
}

// Sets one key from text; false and *why when the value is refused.
bool apply(Config &c, const Row &r, std::string_view v, std::string *why) {
    std::string var = std::string("VIPL_") + r.key.name;
    if (r.rules) {
        std::string w;
        if ((c.*r.rules).parse(v, &w)) return true;
        *why = var + "='" + std::string(v) + "': " + w;
        return false;
    }
    uint32_t x;
    if (parse_u32(v, r.key.min, r.key.max, &x)) {
        if (r.flag)
            c.*r.flag = x != 0;
        else
            c.*r.u32 = x;
        return true;
    }
    *why = var + "='" + std::string(v) + "': expected " +
           (r.flag ? std::string("0 or 1")
                   : "a decimal number in " + std::to_string(r.key.min) + ".." +
                         std::to_string(r.key.max)) +
           "; using " + r.key.default_value;
    return false;
}

Loaded *load() {
    auto *l = new Loaded;
    for (size_t i = 0; i < std::size(kRows); ++i) {
        l->keys[i] = kRows[i].key;
        std::string why;
        apply(l->cfg, kRows[i], kRows[i].key.default_value, &why);
    }
    for (char **e = environ; e && *e; ++e) {
        std::string_view kv(*e);
        if (!kv.starts_with("VIPL_DB_")) continue;
        auto eq = kv.find('=');
        if (eq == std::string_view::npos) continue;
        std::string_view name = kv.substr(5, eq - 5), value = kv.substr(eq + 1);
        const Row *row = nullptr;
        for (const Row &r : kRows)
            if (name == r.key.name) row = &r;
        if (!row) {
            l->problems.push_back("VIPL_" + std::string(name) +
                                  " names no setting (see vipl-run --config)");
            continue;
        }
        std::string why;
        if (!apply(l->cfg, *row, value, &why)) {
            l->problems.push_back(why);
            apply(l->cfg, *row, row->key.default_value, &why);
        }
    }
    return l;
}

const Loaded &loaded() {
    static const Loaded *l = load();
    return *l;
}

} // namespace

std::span<const ConfigKey> config_table() noexcept {
    return {loaded().keys, std::size(kRows)};
}

const Config &config() noexcept {
    return loaded().cfg;
}

const std::vector<std::string> &config_problems() noexcept {
    return loaded().problems;
}

std::string config_value(const char *name) {
    const Config &c = config();
    for (const Row &r : kRows) {
        if (std::strcmp(r.key.name, name) != 0) continue;
        if (r.rules) return (c.*r.rules).text();
        if (r.flag) return c.*r.flag ? "1" : "0";
        return std::to_string(c.*r.u32);
    }
    return "";
}

} // namespace vipl::db
