// The configuration table: every option once, with its default and help; omniORB sees
// each row as an option handler (-ORB<key> on the command line, <key> in omniORB.cfg or
// ORB<key> in the environment).
#include "omnivipl.h"

#include <orbOptions.h>

#include <cstring>
#include <string>

namespace vipl::orb {

Options &options() {
    static Options o;
    return o;
}

StreamOptions stream_options() {
    const Options &o = options();
    StreamOptions s;
    s.buffer_size = o.buffer_size;
    s.recv_buffers = o.recv_buffers;
    s.send_buffers = o.send_buffers;
    s.linger = std::chrono::milliseconds(o.linger_ms);
    s.spin_us = o.spin_us;
    s.nonblocking = true;
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

struct Row {
    const char *key;
    const char *usage;
    const char *argv_usage;
    uint32_t Options::*field; // null: the provider
    uint32_t min, max;
};

const Row kRows[] = {
    {"viplSpinTime", "viplSpinTime = n microseconds polled before sleeping (0..100000)",
     "-ORBviplSpinTime <0..100000 us>", &Options::spin_us, 0, 100000},
    {"viplBufferSize", "viplBufferSize = bytes per message buffer (1024..1048576)",
     "-ORBviplBufferSize <1024..1048576>", &Options::buffer_size, 1024, 1 << 20},
    {"viplRecvBuffers", "viplRecvBuffers = receive buffers per connection (2..256)",
     "-ORBviplRecvBuffers <2..256>", &Options::recv_buffers, 2, 256},
    {"viplSendBuffers", "viplSendBuffers = send buffers per connection (1..256)",
     "-ORBviplSendBuffers <1..256>", &Options::send_buffers, 1, 256},
    {"viplLinger", "viplLinger = ms a closing connection waits for the peer (0..60000)",
     "-ORBviplLinger <0..60000 ms>", &Options::linger_ms, 0, 60000},
    {"viplProvider", "viplProvider = auto | shm | tcp", "-ORBviplProvider <auto|shm|tcp>", nullptr,
     0, 0},
};

class Handler : public omni::orbOptions::Handler {
public:
    explicit Handler(const Row &r)
        : omni::orbOptions::Handler(r.key, r.usage, 1, r.argv_usage), row_(r) {}

    void visit(const char *value, omni::orbOptions::Source) override {
        if (!row_.field) {
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
        CORBA::ULong v;
        if (!omni::orbOptions::getULong(value, v) || v < row_.min || v > row_.max)
            throw omni::orbOptions::BadParam(key(), value, "Out of range");
        options().*row_.field = v;
    }

    void dump(omni::orbOptions::sequenceString &result) override {
        if (!row_.field)
            omni::orbOptions::addKVString(key(), provider_name(options().provider), result);
        else
            omni::orbOptions::addKVULong(key(), options().*row_.field, result);
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
