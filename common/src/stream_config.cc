// The stream's configuration table: declared once here, read from VIPL_<NAME>.
#include "vipl/stream_config.h"

#include "frame.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

extern char **environ;

namespace vipl {

namespace {

enum class Field {
    spin_us,
    buffer_size,
    recv_buffers,
    send_buffers,
    zcopy,
    stage,
    inline_sends,
    linger_ms,
    shareable,
    ready_fd,
    device
};

struct Row {
    StreamConfigKey key;
    Field field;
};

// The one place where stream configuration is declared.  Defaults must be those of
// StreamOptions{} (a test holds them to it).
const Row kRows[] = {
    {{"STREAM_SPIN_US", "u32", "20", 0, 1000000,
      "base budget in microseconds of the spin before a blocking call sleeps, spent by "
      "libvipl's adaptive policy (0: sleep at once)"},
     Field::spin_us},
    {{"STREAM_BUFFER_SIZE", "u32", "65536", 256, detail::kMaxBufferSize,
      "payload bytes of each message buffer; the connecting side's value is used by both "
      "ends"},
     Field::buffer_size},
    {{"STREAM_RECV_BUFFERS", "u32", "16", 1, 1024,
      "receive buffers posted per stream: the data messages the peer may have in flight"},
     Field::recv_buffers},
    {{"STREAM_SEND_BUFFERS", "u32", "16", 1, 1024,
      "registered send buffers per stream: written data held until the peer has it"},
     Field::send_buffers},
    {{"STREAM_ZCOPY_THRESHOLD", "u32", "1048576", 0, 0xffffffffu,
      "blocking writes without deadline of at least this many bytes are not copied: the peer "
      "RDMA-reads them from the caller's memory (0: never)"},
     Field::zcopy},
    {{"STREAM_STAGE_THRESHOLD", "u32", "65536", 0, 0xffffffffu,
      "blocking copied writes with at least this many bytes left stage them in a registered "
      "area the peer RDMA-reads straight into its reader's buffer (0: never)"},
     Field::stage},
    {{"STREAM_INLINE", "u32", "1", 0, 1,
      "1: a write with nothing queued before it goes out as inline sends where the "
      "transport takes them (copied straight from the caller's buffer into the transport); "
      "0: through the send buffers"},
     Field::inline_sends},
    {{"STREAM_LINGER_MS", "u32", "5000", 0, 3600000,
      "milliseconds the destructor's orderly close waits for the peer to take what was "
      "written"},
     Field::linger_ms},
    {{"STREAM_SHAREABLE", "u32", "0", 0, 1,
      "1: streams are shared with the children forked after they are made, and usable by "
      "several threads at once"},
     Field::shareable},
    {{"STREAM_READY_FD", "u32", "1", 0, 1,
      "1: fd() is an epoll fd readable on the stream's readiness; 0: fd() is the VI's wait "
      "fd and the caller asks events() (no system call on the data path)"},
     Field::ready_fd},
    {{"STREAM_DEVICE", "string", "", 0, 0,
      "VIPL device used instead of the one the URI picks (shm0, tcp0, tcp:<address>)"},
     Field::device},
};

const std::span<const Row> rows() {
    return kRows;
}

const Row *find(std::string_view key) {
    if (key.starts_with("VIPL_")) key.remove_prefix(5);
    for (const Row &r : rows())
        if (key == r.key.name) return &r;
    return nullptr;
}

uint64_t get_u32(const StreamOptions &o, Field f) {
    switch (f) {
    case Field::spin_us:
        return o.spin_us;
    case Field::buffer_size:
        return o.buffer_size;
    case Field::recv_buffers:
        return o.recv_buffers;
    case Field::send_buffers:
        return o.send_buffers;
    case Field::zcopy:
        return o.zcopy_threshold;
    case Field::stage:
        return o.stage_threshold;
    case Field::inline_sends:
        return o.inline_sends;
    case Field::linger_ms:
        return static_cast<uint64_t>(o.linger.count());
    case Field::shareable:
        return o.shareable;
    case Field::ready_fd:
        return o.ready_fd;
    case Field::device:
        break;
    }
    return 0;
}

void set_u32(StreamOptions &o, Field f, uint32_t v) {
    switch (f) {
    case Field::spin_us:
        o.spin_us = v;
        break;
    case Field::buffer_size:
        o.buffer_size = v;
        break;
    case Field::recv_buffers:
        o.recv_buffers = v;
        break;
    case Field::send_buffers:
        o.send_buffers = v;
        break;
    case Field::zcopy:
        o.zcopy_threshold = v;
        break;
    case Field::stage:
        o.stage_threshold = v;
        break;
    case Field::inline_sends:
        o.inline_sends = v != 0;
        break;
    case Field::linger_ms:
        o.linger = std::chrono::milliseconds(v);
        break;
    case Field::shareable:
        o.shareable = v != 0;
        break;
    case Field::ready_fd:
        o.ready_fd = v != 0;
        break;
    case Field::device:
        break;
    }
}

// Digits only (decimal, or hexadecimal after 0x): strtoull alone would take signs and
// leading blanks.
bool parse_number(std::string_view text, uint64_t &out) {
    int base = 10;
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        text.remove_prefix(2);
        base = 16;
    }
    if (text.empty() || text.size() > 20) return false;
    std::string s(text);
    for (char c : s)
        if (!(base == 16 ? isxdigit(static_cast<unsigned char>(c)) : isdigit(c))) return false;
    errno = 0;
    out = strtoull(s.c_str(), nullptr, base);
    return errno == 0;
}

std::error_code invalid(std::string *why, std::string text) {
    if (why) *why = std::move(text);
    return std::make_error_code(std::errc::invalid_argument);
}

} // namespace

std::span<const StreamConfigKey> stream_config_table() noexcept {
    static const std::vector<StreamConfigKey> keys = [] {
        std::vector<StreamConfigKey> k;
        for (const Row &r : rows()) k.push_back(r.key);
        return k;
    }();
    return keys;
}

std::error_code set_stream_option(StreamOptions &o, std::string_view key, std::string_view value,
                                  std::string *why) {
    const Row *r = find(key);
    std::string var = "VIPL_" + std::string(r ? r->key.name : key);
    if (!r) return invalid(why, var + ": no such stream option");
    if (r->field == Field::device) {
        o.device = std::string(value);
        return {};
    }
    uint64_t v;
    if (!parse_number(value, v))
        return invalid(why, var + "=" + std::string(value) + ": not a number");
    if (v < r->key.min || v > r->key.max)
        return invalid(why, var + "=" + std::string(value) + ": out of range " +
                                std::to_string(r->key.min) + ".." + std::to_string(r->key.max));
    set_u32(o, r->field, static_cast<uint32_t>(v));
    return {};
}

std::string stream_option_value(const StreamOptions &o, std::string_view key) {
    const Row *r = find(key);
    if (!r) return {};
    if (r->field == Field::device) return o.device;
    return std::to_string(get_u32(o, r->field));
}

StreamOptions stream_options_from_env(std::error_code &ec, std::string *why) {
    StreamOptions o;
    std::string problems;
    auto note = [&](const std::string &p) { problems += (problems.empty() ? "" : "; ") + p; };
    for (const Row &r : rows()) {
        std::string var = std::string("VIPL_") + r.key.name;
        const char *text = getenv(var.c_str());
        if (!text || !*text) continue;
        std::string one;
        if (set_stream_option(o, r.key.name, text, &one)) note(one);
    }
    for (char **e = environ; e && *e; ++e) {
        std::string_view kv(*e);
        if (!kv.starts_with("VIPL_STREAM_")) continue;
        std::string_view name = kv.substr(0, kv.find('='));
        if (!find(name)) note(std::string(name) + ": no such stream option");
    }
    if (why) *why = problems;
    ec = problems.empty() ? std::error_code() : std::make_error_code(std::errc::invalid_argument);
    return o;
}

} // namespace vipl
