// vipl-stream-config: the stream configuration keys, their defaults, ranges and the
// values the environment gives this process.  Exit status 1 when the environment holds
// a bad VIPL_STREAM_* value.
#include "vipl/stream_config.h"

#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char **argv) {
    if (argc > 1) {
        std::fprintf(stderr, "usage: %s\n(lists the VIPL_STREAM_* environment variables)\n",
                     argv[0]);
        return 2;
    }
    std::error_code ec;
    std::string why;
    vipl::StreamOptions o = vipl::stream_options_from_env(ec, &why);
    std::printf("Stream configuration (environment variable VIPL_<KEY>)\n");
    for (const vipl::StreamConfigKey &k : vipl::stream_config_table()) {
        std::string value = vipl::stream_option_value(o, k.name);
        std::printf("  %-24s %-6s default %-9s value %-9s", k.name, k.type,
                    *k.default_value ? k.default_value : "\"\"",
                    value.empty() ? "\"\"" : value.c_str());
        if (std::strcmp(k.type, "u32") == 0)
            std::printf(" range %llu..%llu", static_cast<unsigned long long>(k.min),
                        static_cast<unsigned long long>(k.max));
        std::printf("\n      %s\n", k.help);
    }
    if (ec) {
        std::fprintf(stderr, "vipl-stream-config: %s\n", why.c_str());
        return 1;
    }
    return 0;
}
