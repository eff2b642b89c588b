// The ORB's options: each a row mapping omniORB's name onto a stream option of common's
// table (one range, default and help per setting); omniORB sees each row as an option
// handler (-ORB<key> on the command line, <key> in omniORB.cfg or ORB<key> in the env).
#include "omnivipl.h"

#include <orbOptions.h>

#include "vipl/stream_config.h"

#include <cstring>
#include <string>

namespace vipl::orb {

Options &options() {
    static Options o;
    return o;
}

StreamOptions stream_options() {
    StreamOptions s = options().stream;
    s.nonblocking = true; // omniORB's connections wait in the transport's own loops
    return s;
}

const char *provider_name(Transport t) {
    switch (t) {
    case Transport::shm:
        return "shm";
    case Transport::tcp:
        return "tcp";
    default:
        return "auto";
    }
}

namespace {

// Each ORB option is a stream option under omniORB's name: its range, default and
// help come from common's table (vipl/stream_config.h); only the provider is the ORB's.
struct Row {
    const char *key;
    const char *stream_key; // null: the provider
};

const Row kRows[] = {
    {"viplSpinTime", "STREAM_SPIN_US"},         {"viplBufferSize", "STREAM_BUFFER_SIZE"},
    {"viplRecvBuffers", "STREAM_RECV_BUFFERS"}, {"viplSendBuffers", "STREAM_SEND_BUFFERS"},
    {"viplLinger", "STREAM_LINGER_MS"},         {"viplProvider", nullptr},
};

const StreamConfigKey *stream_key(const char *name) {
    for (const StreamConfigKey &k : stream_config_table())
        if (!strcmp(k.name, name)) return &k;
    return nullptr;
}

// "viplLinger = <help> (0..3600000, default 5000)" and "-ORBviplLinger <0..3600000>".
std::string usage_text(const Row &r, bool argv) {
    if (!r.stream_key)
        return argv ? std::string("-ORB") + r.key + " <auto|shm|tcp>"
                    : std::string(r.key) + " = auto | shm | tcp (default auto: shm for this host)";
    const StreamConfigKey *k = stream_key(r.stream_key);
    std::string range = std::to_string(k->min) + ".." + std::to_string(k->max);
    if (argv) return std::string("-ORB") + r.key + " <" + range + ">";
    return std::string(r.key) + " = " + k->help + " (" + range + ", default " + k->default_value +
           ")";
}

// The usage texts omniORB's handler points to, made before it (base-from-member).
struct UsageTexts {
    std::string usage, argv_usage;
};

class Handler : private UsageTexts, public omni::orbOptions::Handler {
public:
    explicit Handler(const Row &r)
        : UsageTexts{usage_text(r, false), usage_text(r, true)}, omni::orbOptions::Handler(
                                                                     r.key,
                                                                     UsageTexts::usage.c_str(), 1,
                                                                     argv_usage.c_str()),
          row_(r) {}

    void visit(const char *value, omni::orbOptions::Source) override {
        if (!row_.stream_key) {
            if (!strcmp(value, "auto"))
                options().provider = Transport::automatic;
            else if (!strcmp(value, "shm"))
                options().provider = Transport::shm;
            else if (!strcmp(value, "tcp"))
                options().provider = Transport::tcp;
            else
                throw omni::orbOptions::BadParam(key(), value, "Expect auto, shm or tcp");
            return;
        }
        std::string why;
        if (set_stream_option(options().stream, row_.stream_key, value, &why))
            throw omni::orbOptions::BadParam(key(), value, why.c_str());
    }

    void dump(omni::orbOptions::sequenceString &result) override {
        std::string v = row_.stream_key ? stream_option_value(options().stream, row_.stream_key)
                                        : provider_name(options().provider);
        omni::orbOptions::addKVString(key(), v.c_str(), result);
    }

private:
    const Row &row_;
};

} // namespace

void register_option_handlers() {
    static std::vector<std::unique_ptr<Handler>> handlers;
    if (!handlers.empty()) return;
    for (const Row &r : kRows) {
        handlers.push_back(std::make_unique<Handler>(r));
        omni::orbOptions::singleton().registerHandler(*handlers.back());
    }
}

} // namespace vipl::orb
