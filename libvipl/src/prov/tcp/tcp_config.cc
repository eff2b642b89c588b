// The tcp provider's configuration table: its keys, under the provider's prefix.
#include "prov/tcp/tcp_config.h"

namespace vipl::tcp {
namespace {

#define ROW(name, def, type, field, lo, hi, help)                                                  \
    VIPL_CONFIG_ROW(TcpConfig, name, def, type, field, lo, hi, help)

const ConfigRow kRows[] = {
    ROW("TCP_PORT_BASE", "20000", u32, port_base, 1, 65535,
        "first TCP port discriminators hash to (two-byte discriminators name their port "
        "directly)"),
    ROW("TCP_PORT_RANGE", "12000", u32, port_range, 1, 65535,
        "how many ports from TCP_PORT_BASE discriminators hash to"),
    ROW("TCP_DEAD_MS", "1500", u32, dead_ms, 100, 3600000,
        "a silent link is declared dead after about this long (keepalive and unacknowledged "
        "data), plus at most one second of probe interval"),
    ROW("TCP_FRAME_WAIT_US", "2000", u32, frame_wait_us, 0, 1000000,
        "a call that finds a message partly arrived waits this long at most for the rest (it "
        "is on the wire), rather than return empty-handed after a wake-up"),
    ROW("TCP_ACK_THRESHOLD", "65536", u32, ack_threshold, 0, 1u << 30,
        "reliable delivery: a send larger than this completes when the target has placed it "
        "(its acknowledgement costs little next to the transfer); a smaller one as soon as "
        "the socket has it"),
    ROW("TCP_WINDOW", "4194304", u32, window, 65536, 1u << 30,
        "bytes a connection's receiver takes in ahead of its program (its socket buffer is "
        "sized for it, within the system's limits); senders wait for more"),
};
#undef ROW

void check(void *values, std::vector<std::string> &bad) {
    auto *c = static_cast<TcpConfig *>(values);
    if (c->port_base + c->port_range > 65536) {
        bad.push_back("VIPL_TCP_PORT_RANGE (runs past port 65535)");
        c->port_range = 65536 - c->port_base;
    }
}

} // namespace

ConfigTable &config_table() {
    static ConfigOf<TcpConfig> table(kRows, check);
    return table;
}

const TcpConfig &config() {
    return static_cast<ConfigOf<TcpConfig> &>(config_table()).get();
}

} // namespace vipl::tcp
