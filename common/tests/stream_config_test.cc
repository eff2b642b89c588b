// The configuration table: declaration, parsing, the environment, a stream built from it.
#include "vipl/stream_config.h"

#include "helpers.h"

#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

using namespace std::chrono_literals;

namespace {

// Sets environment variables for one test and removes them afterwards.
struct Env {
    std::vector<std::string> names;
    void set(const char *name, const char *value) {
        setenv(name, value, 1);
        names.push_back(name);
    }
    ~Env() {
        for (auto &n : names) unsetenv(n.c_str());
    }
};

} // namespace

TEST_CASE("config: the table declares every key once with the defaults of StreamOptions") {
    std::set<std::string> names;
    vipl::StreamOptions defaults;
    for (const vipl::StreamConfigKey &k : vipl::stream_config_table()) {
        INFO(k.name);
        CHECK(names.insert(k.name).second);
        CHECK(std::string(k.name).starts_with("STREAM_"));
        CHECK(std::strlen(k.help) > 10);
        CHECK(vipl::stream_option_value(defaults, k.name) == k.default_value);
        if (std::strcmp(k.type, "u32") == 0) {
            uint64_t d = std::strtoull(k.default_value, nullptr, 10);
            CHECK(d >= k.min);
            CHECK(d <= k.max);
        } else {
            CHECK(std::strcmp(k.type, "string") == 0);
        }
    }
    for (const char *n : {"STREAM_SPIN_US", "STREAM_BUFFER_SIZE", "STREAM_RECV_BUFFERS",
                          "STREAM_SEND_BUFFERS", "STREAM_ZCOPY_THRESHOLD", "STREAM_STAGE_THRESHOLD",
                          "STREAM_LINGER_MS", "STREAM_SHAREABLE", "STREAM_READY_FD"})
        CHECK(names.count(n) == 1);
}

TEST_CASE("config: set_stream_option takes valid values and refuses bad ones with a reason") {
    vipl::StreamOptions o;
    std::string why;
    CHECK(!vipl::set_stream_option(o, "STREAM_SPIN_US", "0", &why));
    CHECK(o.spin_us == 0);
    CHECK(!vipl::set_stream_option(o, "VIPL_STREAM_RECV_BUFFERS", "0x20", &why));
    CHECK(o.recv_buffers == 32);
    CHECK(!vipl::set_stream_option(o, "STREAM_LINGER_MS", "250", &why));
    CHECK(o.linger == 250ms);
    CHECK(!vipl::set_stream_option(o, "STREAM_SHAREABLE", "1", &why));
    CHECK(o.shareable);
    CHECK(!vipl::set_stream_option(o, "STREAM_READY_FD", "0", &why));
    CHECK(!o.ready_fd);
    CHECK(vipl::set_stream_option(o, "STREAM_READY_FD", "2", &why) == std::errc::invalid_argument);
    CHECK(!o.ready_fd);
    CHECK(!vipl::set_stream_option(o, "STREAM_DEVICE", "tcp:127.0.0.1", &why));
    CHECK(o.device == "tcp:127.0.0.1");

    const vipl::StreamOptions before = o;
    for (const char *bad :
         {"", "-1", "+5", " 5", "12abc", "0x", "1e3", "99999999999999999999999"}) {
        INFO(bad);
        auto ec = vipl::set_stream_option(o, "STREAM_SEND_BUFFERS", bad, &why);
        CHECK(ec == std::errc::invalid_argument);
        CHECK(why.find("VIPL_STREAM_SEND_BUFFERS") != std::string::npos);
        CHECK(o.send_buffers == before.send_buffers);
    }
    CHECK(vipl::set_stream_option(o, "STREAM_RECV_BUFFERS", "0", &why) ==
          std::errc::invalid_argument);
    CHECK(why == "VIPL_STREAM_RECV_BUFFERS=0: out of range 1..1024");
    CHECK(vipl::set_stream_option(o, "STREAM_BUFFER_SIZE", "4294967296", &why));
    CHECK(why.find("out of range") != std::string::npos);
    CHECK(vipl::set_stream_option(o, "STREAM_NO_SUCH", "1", &why) == std::errc::invalid_argument);
    CHECK(why == "VIPL_STREAM_NO_SUCH: no such stream option");
    CHECK(o.recv_buffers == 32);
}

TEST_CASE("config: the environment sets options and bad values are reported without harm") {
    {
        Env env;
        env.set("VIPL_STREAM_SEND_BUFFERS", "8");
        env.set("VIPL_STREAM_LINGER_MS", "250");
        env.set("VIPL_STREAM_ZCOPY_THRESHOLD", "0");
        env.set("VIPL_STREAM_SPIN_US", ""); // empty: ignored
        std::error_code ec;
        std::string why;
        auto o = vipl::stream_options_from_env(ec, &why);
        CHECK(!ec);
        CHECK(why.empty());
        CHECK(o.send_buffers == 8);
        CHECK(o.linger == 250ms);
        CHECK(o.zcopy_threshold == 0);
        CHECK(o.spin_us == vipl::StreamOptions{}.spin_us);
    }
    Env env;
    env.set("VIPL_STREAM_RECV_BUFFERS", "4");
    env.set("VIPL_STREAM_BUFFER_SIZE", "huge");
    env.set("VIPL_STREAM_SPNI_US", "3"); // a typo
    std::error_code ec;
    std::string why;
    auto o = vipl::stream_options_from_env(ec, &why);
    CHECK(ec == std::errc::invalid_argument);
    CHECK(why.find("VIPL_STREAM_BUFFER_SIZE=huge: not a number") != std::string::npos);
    CHECK(why.find("VIPL_STREAM_SPNI_US: no such stream option") != std::string::npos);
    CHECK(o.recv_buffers == 4);
    CHECK(o.buffer_size == vipl::StreamOptions{}.buffer_size);
}

TEST_CASE("config: options from the environment drive a stream") {
    std::string base = CT_PROVIDER();
    Env env;
    env.set("VIPL_STREAM_BUFFER_SIZE", "4096");
    env.set("VIPL_STREAM_RECV_BUFFERS", "4");
    env.set("VIPL_STREAM_STAGE_THRESHOLD", "0"); // every byte in data messages
    std::error_code ec;
    auto o = vipl::stream_options_from_env(ec);
    REQUIRE(!ec);
    auto p = vt::connect_pair(base, o);
    CHECK(p.client.options().stage_threshold == 0);
    CHECK(p.client.options().buffer_size == 4096);
    CHECK(p.server.options().buffer_size == 4096);
    std::vector<std::byte> buf(100000), in(100000);
    vt::fill(buf.data(), buf.size(), 0, 1);
    // The writer closes (in order) after writing: data held back by flow control leaves
    // only inside its calls.
    std::thread w([&] {
        vt::write_all(p.client, buf.data(), buf.size());
        p.client.close(vipl::deadline_in(5s));
    });
    size_t got = 0;
    for (;;) {
        size_t n = p.server.read({in.data() + got, in.size() - got}, vipl::deadline_in(5s), ec);
        if (ec || n == 0) break;
        got += n;
    }
    w.join();
    CHECK(got == in.size());
    CHECK(vt::check(in.data(), got, 0, 1) == -1);
    CHECK(!ec);
    CHECK(p.server.counters().messages_in >= buf.size() / 4096); // 4 KiB messages
    CHECK(p.client.counters().bytes_staged == 0);
}
