// The extensions of <vipl_ext.h>: return-code names, wait descriptors,
// counters, provider and configuration introspection, signals.
#include "support.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <future>
#include <poll.h>
#include <pthread.h>
#include <set>
#include <sys/wait.h>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

} // namespace

TEST_CASE("VipReturnString names every return code", "[ext]") {
#define NAMED(code)                                                                                \
    { code, #code }
    const std::pair<VIP_RETURN, const char *> codes[] = {
        NAMED(VIP_SUCCESS),
        NAMED(VIP_NOT_DONE),
        NAMED(VIP_INVALID_PARAMETER),
        NAMED(VIP_ERROR_RESOURCE),
        NAMED(VIP_TIMEOUT),
        NAMED(VIP_REJECT),
        NAMED(VIP_INVALID_RELIABILITY_LEVEL),
        NAMED(VIP_INVALID_MTU),
        NAMED(VIP_INVALID_QOS),
        NAMED(VIP_INVALID_PTAG),
        NAMED(VIP_INVALID_RDMAREAD),
        NAMED(VIP_DESCRIPTOR_ERROR),
        NAMED(VIP_INVALID_STATE),
        NAMED(VIP_ERROR_NAMESERVICE),
        NAMED(VIP_NO_MATCH),
        NAMED(VIP_NOT_REACHABLE),
        NAMED(VIP_ERROR_NOT_SUPPORTED),
        NAMED(VIP_INTERRUPTED),
        NAMED(VIP_ERROR_REENTERED),
    };
#undef NAMED
    for (auto &[code, name] : codes) {
        const char *got = VipReturnString(code);
        REQUIRE(got != nullptr);
        CHECK(std::string(got) == name);
    }
    for (int unknown : {19, 100, 0x7fffffff, -1}) {
        const char *got = VipReturnString(static_cast<VIP_RETURN>(unknown));
        REQUIRE(got != nullptr);
        CHECK(std::string(got) == "VIP_UNKNOWN");
    }
}

TEST_CASE("Providers describe themselves and list the devices they open", "[ext]") {
    std::string device = VT_DEVICE();
    VIP_ULONG count = VipProviderCount();
    REQUIRE(count >= 1);
    bool listed = false;
    std::set<std::string> names;
    for (VIP_ULONG i = 0; i < count; ++i) {
        VIP_PROVIDER_INFO info{};
        REQUIRE(VipProviderInfo(i, &info) == VIP_SUCCESS);
        REQUIRE(info.Name != nullptr);
        REQUIRE(info.Devices != nullptr);
        REQUIRE(info.Summary != nullptr);
        CHECK(strlen(info.Name) > 0);
        CHECK(names.insert(info.Name).second);
        std::string devs = std::string(",") + info.Devices + ",";
        for (char &c : devs)
            if (c == ' ') c = ',';
        listed |= devs.find("," + device + ",") != std::string::npos;
    }
    CHECK(listed);
    VIP_PROVIDER_INFO info;
    CHECK(VipProviderInfo(count, &info) == VIP_INVALID_PARAMETER);
    CHECK(VipProviderInfo(~VIP_ULONG(0), &info) == VIP_INVALID_PARAMETER);
    CHECK(VipProviderInfo(0, nullptr) == VIP_INVALID_PARAMETER);
}

TEST_CASE("Configuration keys are listed with their values", "[ext]") {
    VIP_ULONG count = VipConfigCount();
    REQUIRE(count >= 1);
    std::set<std::string> names;
    for (VIP_ULONG i = 0; i < count; ++i) {
        VIP_CONFIG_INFO info{};
        REQUIRE(VipConfigInfo(i, &info) == VIP_SUCCESS);
        REQUIRE(info.Name != nullptr);
        REQUIRE(info.DefaultValue != nullptr);
        REQUIRE(info.Value != nullptr);
        REQUIRE(info.Help != nullptr);
        CHECK(names.insert(info.Name).second);
        // The strings live as long as the process.
        VIP_CONFIG_INFO again{};
        REQUIRE(VipConfigInfo(i, &again) == VIP_SUCCESS);
        CHECK(again.Name == info.Name);
        CHECK(again.Value == info.Value);
    }
    VIP_CONFIG_INFO info;
    CHECK(VipConfigInfo(count, &info) == VIP_INVALID_PARAMETER);
    CHECK(VipConfigInfo(0, nullptr) == VIP_INVALID_PARAMETER);
}

TEST_CASE("configuration from the environment (fresh process)", "[.][ext-env]") {
    const char *env = getenv("VIPL_TEST_KEY");
    REQUIRE(env != nullptr);
    std::string key = env;
    std::string want = getenv("VIPL_TEST_WANT");
    CHECK(vt::config_value(key.c_str()) == want);
}

namespace {

// The default of configuration key `name` ("" when there is no such key).
std::string config_default(const std::string &name) {
    for (VIP_ULONG i = 0; i < VipConfigCount(); ++i) {
        VIP_CONFIG_INFO info;
        REQUIRE(VipConfigInfo(i, &info) == VIP_SUCCESS);
        if (name == info.Name) return info.DefaultValue;
    }
    return {};
}

// Runs the fresh-process case with `env` set and VIPL_TEST_KEY's value expected.
void expect_fresh(const std::vector<std::string> &env, const std::string &key,
                  const std::string &want) {
    std::vector<std::string> all = env;
    all.push_back("VIPL_TEST_KEY=" + key);
    all.push_back("VIPL_TEST_WANT=" + want);
    int status = vt::run_fresh("configuration from the environment (fresh process)", all);
    INFO(vt::status_text(status));
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}

} // namespace

TEST_CASE("Configuration values come from VIPL_ variables", "[ext]") {
    // A core key and a provider's (listed after the core's), each set to another valid
    // value in a fresh process.
    for (std::string key : {"CONNECT_ACK_MS", "SHM_LIVENESS_MS", "TCP_DEAD_MS"}) {
        INFO(key);
        std::string def = config_default(key);
        REQUIRE(!def.empty());
        std::string other = def == "1037" ? "1038" : "1037";
        expect_fresh({"VIPL_" + key + "=" + other}, key, other);
    }
}

TEST_CASE("Renamed shm keys still read their old names, the new name first", "[ext]") {
    // SHM_CMA was CMA, SHM_COPY_THRESHOLD was COPY_THRESHOLD (libvipl's README).
    REQUIRE(config_default("CMA").empty());
    REQUIRE(config_default("SHM_CMA") == "1");
    expect_fresh({"VIPL_CMA=0"}, "SHM_CMA", "0");
    expect_fresh({"VIPL_CMA=0", "VIPL_SHM_CMA=1"}, "SHM_CMA", "1");
    std::string def = config_default("SHM_COPY_THRESHOLD");
    REQUIRE(!def.empty());
    std::string other = def == "256" ? "257" : "256";
    expect_fresh({"VIPL_COPY_THRESHOLD=" + other}, "SHM_COPY_THRESHOLD", other);
}

namespace {

struct LogSeen {
    std::vector<std::pair<VIP_ULONG, std::string>> lines;
};

void record_log(VIP_PVOID context, VIP_ULONG level, const VIP_CHAR *text) {
    static_cast<LogSeen *>(context)->lines.emplace_back(level, text);
}

} // namespace

TEST_CASE("the library's log watched in a fresh process", "[.][ext-log]") {
    // The case guard watches the log of every test process: this one takes it over.
    LogSeen seen;
    REQUIRE(VipLogHandler(record_log, &seen) == VIP_SUCCESS);
    VIP_CONFIG_INFO info;
    REQUIRE(VipConfigInfo(0, &info) == VIP_SUCCESS); // the first use reads the core's keys
    if (std::string(getenv("VIPL_TEST_WANT")) == "1") {
        REQUIRE(seen.lines.size() == 1);
        CHECK(seen.lines[0].first == VIP_LOG_WARNING);
        CHECK(seen.lines[0].second == "ignoring invalid configuration VIPL_SPIN_US=lots");
    } else {
        CHECK(seen.lines.empty());
    }
    // Unwatched, the shm provider's keys (read at its first use) warn unseen.
    REQUIRE(VipLogHandler(nullptr, nullptr) == VIP_SUCCESS);
    size_t before = seen.lines.size();
    CHECK(vt::config_value("SHM_RING_SIZE") == "524288"); // the default, for the bad value
    CHECK(seen.lines.size() == before);
}

TEST_CASE("VipLogHandler gets each line VIPL_LOG_LEVEL lets through until it is unset", "[ext]") {
    const std::string name = "the library's log watched in a fresh process";
    const std::vector<std::string> bad = {"VIPL_SPIN_US=lots", "VIPL_SHM_RING_SIZE=3000"};
    std::vector<std::string> env = bad;
    env.push_back("VIPL_TEST_WANT=1");
    int status = vt::run_fresh(name, env);
    INFO("warnings let through: " << vt::status_text(status));
    CHECK(status == 0);
    env = bad;
    env.push_back("VIPL_TEST_WANT=0");
    env.push_back("VIPL_LOG_LEVEL=error");
    status = vt::run_fresh(name, env);
    INFO("errors only: " << vt::status_text(status));
    CHECK(status == 0);
}

TEST_CASE("VipQueryViCounters counts messages and bytes", "[ext]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 1 << 20), mb(nb, 1 << 20);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    VIP_VI_COUNTERS c{};
    REQUIRE(VipQueryViCounters(p.a, &c) == VIP_SUCCESS);
    CHECK(c.SendsPosted == 0);
    CHECK(c.RecvsCompleted == 0);
    CHECK(c.BytesSent == 0);
    CHECK(c.BytesReceived == 0);
    std::vector<uint32_t> sizes = {0, 10, 600, 70000};
    uint64_t total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
        vt::set_desc(ma.desc(i), ma.base + 200000 * (i + 1) - 100000, 100000, ma.mh);
        REQUIRE(VipPostRecv(p.a, ma.desc(i), ma.mh) == VIP_SUCCESS);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
        vt::set_desc(mb.desc(i), mb.base + 200000 * (i + 1) - 100000, sizes[i], mb.mh);
        REQUIRE(VipPostSend(p.b, mb.desc(i), mb.mh) == VIP_SUCCESS);
        total += sizes[i];
    }
    VIP_DESCRIPTOR *d;
    for (size_t i = 0; i < sizes.size(); ++i) {
        REQUIRE(VipRecvWait(p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
        REQUIRE(VipSendWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
    }
    REQUIRE(VipQueryViCounters(p.b, &c) == VIP_SUCCESS);
    CHECK(c.SendsPosted == sizes.size());
    CHECK(c.BytesSent == total);
    CHECK(c.RecvsCompleted == 0);
    REQUIRE(VipQueryViCounters(p.a, &c) == VIP_SUCCESS);
    CHECK(c.RecvsCompleted == sizes.size());
    CHECK(c.BytesReceived == total);
    CHECK(c.SendsPosted == 0);

    CHECK(VipQueryViCounters(p.a, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryViCounters(nullptr, &c) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipQueryViCounters(h, &c) == VIP_INVALID_PARAMETER);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("VipGetViWaitFd and VipGetCQWaitFd check their arguments", "[ext][waitfd][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(n.nic, 4, &cq) == VIP_SUCCESS);
    int fd = -7;
    CHECK(VipGetViWaitFd(vi, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipGetCQWaitFd(cq, nullptr) == VIP_INVALID_PARAMETER);
    std::vector<VIP_PVOID> bad = vt::garbage_handles(100);
    bad.push_back(nullptr);
    bad.push_back(n.nic);
    for (VIP_PVOID h : bad) {
        CHECK(VipGetViWaitFd(h, &fd) == VIP_INVALID_PARAMETER);
        CHECK(VipGetCQWaitFd(h, &fd) == VIP_INVALID_PARAMETER);
    }
    CHECK(VipGetViWaitFd(cq, &fd) == VIP_INVALID_PARAMETER);
    CHECK(VipGetCQWaitFd(vi, &fd) == VIP_INVALID_PARAMETER);
    CHECK(fd == -7);
    REQUIRE(VipGetViWaitFd(vi, &fd) == VIP_SUCCESS);
    CHECK(fd >= 0);
    // An idle VI with nothing queued has nothing to report.
    CHECK_FALSE(vt::readable(fd, 20));
    REQUIRE(VipGetCQWaitFd(cq, &fd) == VIP_SUCCESS);
    CHECK(fd >= 0);
    CHECK_FALSE(vt::readable(fd, 20));
}

namespace {

// The error callback matters here: registering one starts the library's
// notification thread, which then also watches these VIs.
void vi_fd_sequence(const std::string &device, bool error_callback) {
    INFO((error_callback ? "with an error callback" : "without an error callback"));
    vt::ErrorLog log;
    vt::Nic na(device), nb(device);
    if (error_callback) {
        log.install(na.nic);
        log.install(nb.nic);
    }
    vt::Memory ma(na, 1 << 20), mb(nb, 1 << 20);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    int fa = -1, fb = -1;
    REQUIRE(VipGetViWaitFd(p.a, &fa) == VIP_SUCCESS);
    REQUIRE(VipGetViWaitFd(p.b, &fb) == VIP_SUCCESS);
    CHECK_FALSE(vt::readable(fa, 50));
    CHECK_FALSE(vt::readable(fb, 50));
    vt::set_desc(ma.desc(0), ma.base + 65536, 200000, ma.mh);
    REQUIRE(VipPostRecv(p.a, ma.desc(0), ma.mh) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d;
    CHECK(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
    CHECK_FALSE(vt::readable(fa, 50));

    for (uint32_t len : {20u, 150000u}) {
        INFO("length " << len);
        // Something arrives: the receiver's fd becomes readable by itself.
        vt::set_desc(mb.desc(0), mb.base + 65536, len, mb.mh);
        REQUIRE(VipPostSend(p.b, mb.desc(0), mb.mh) == VIP_SUCCESS);
        CHECK(vt::readable(fa, vt::kWaitMs));
        REQUIRE(VipRecvDone(p.a, &d) == VIP_SUCCESS);
        CHECK(d->CS.Length == len);
        // Done found nothing more: re-armed, quiet again.
        CHECK(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
        CHECK(VipSendDone(p.a, &d) == VIP_NOT_DONE);
        CHECK_FALSE(vt::readable(fa, 50));
        // The sender's fd reports the send completion.
        CHECK(vt::readable(fb, vt::kWaitMs));
        REQUIRE(VipSendDone(p.b, &d) == VIP_SUCCESS);
        CHECK(d == mb.desc(0));
        CHECK(VipSendDone(p.b, &d) == VIP_NOT_DONE);
        CHECK(VipRecvDone(p.b, &d) == VIP_NOT_DONE);
        CHECK_FALSE(vt::readable(fb, 50));
        vt::set_desc(ma.desc(0), ma.base + 65536, 200000, ma.mh);
        REQUIRE(VipPostRecv(p.a, ma.desc(0), ma.mh) == VIP_SUCCESS);
    }
    // A completion that is already there when the fd is asked for.
    vt::set_desc(mb.desc(0), mb.base + 65536, 8, mb.mh);
    REQUIRE(VipPostSend(p.b, mb.desc(0), mb.mh) == VIP_SUCCESS);
    REQUIRE(VipSendWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
    REQUIRE(VipGetViWaitFd(p.a, &fa) == VIP_SUCCESS);
    CHECK(vt::readable(fa, vt::kWaitMs));
    REQUIRE(VipRecvWait(p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
    CHECK_FALSE(vt::readable(fa, 50));

    // Leaving the Connected state makes it readable with nothing completed.
    REQUIRE(VipDisconnect(p.b) == VIP_SUCCESS);
    CHECK(vt::readable(fa, vt::kWaitMs));
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

} // namespace

TEST_CASE("A VI's wait fd is readable exactly when there is something to take", "[ext][waitfd]") {
    std::string device = VT_DEVICE();
    vi_fd_sequence(device, false);
}

TEST_CASE("A VI's wait fd works while an error callback is registered", "[ext][waitfd]") {
    std::string device = VT_DEVICE();
    vi_fd_sequence(device, true);
}

TEST_CASE("A VI's wait fd becomes readable when the peer process dies", "[ext][waitfd][process]") {
    std::string device = VT_DEVICE();
    bool error_callback = GENERATE(false, true);
    INFO((error_callback ? "with an error callback" : "without an error callback"));
    // The usual wait fd; one armed explicitly before the death; one armed after it.
    int arming = GENERATE(0, 1, 2);
    INFO("arming " << arming);
    std::string disc = vt::unique_disc("-fddeath");
    vt::Pipe up, down;
    int pid = vt::spawn_child([&]() -> int {
        VIP_NIC_HANDLE nic;
        if (VipOpenNic(device.c_str(), &nic) != VIP_SUCCESS) return 1;
        VIP_NIC_ATTRIBUTES attrs;
        VIP_PROTECTION_HANDLE ptag;
        if (VipQueryNic(nic, &attrs) != VIP_SUCCESS || VipCreatePtag(nic, &ptag) != VIP_SUCCESS)
            return 2;
        VIP_VI_ATTRIBUTES va{VIP_SERVICE_RELIABLE_DELIVERY,
                             attrs.MaxTransferSize,
                             nullptr,
                             ptag,
                             VIP_FALSE,
                             VIP_FALSE,
                             VIP_FALSE};
        VIP_VI_HANDLE vi;
        if (VipCreateVi(nic, &va, nullptr, nullptr, &vi) != VIP_SUCCESS) return 3;
        vt::Address local(nic, disc + "c"), remote(nic, disc);
        if (vt::connect_request(vi, local.get(), remote.get(), 10000) != VIP_SUCCESS) return 4;
        up.put('c');
        char c;
        down.get(&c, 20000);
        _exit(0);
    });
    vt::ErrorLog log;
    vt::Nic n(device);
    if (error_callback) log.install(n.nic);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    vt::Address local(n.nic, disc);
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    REQUIRE(VipConnectWait(n.nic, local.get(), 10000, remote.get(), &ra, &conn) == VIP_SUCCESS);
    REQUIRE(VipConnectAccept(conn, vi) == VIP_SUCCESS);
    char c;
    REQUIRE(up.get(&c, 10000));
    int fd;
    REQUIRE(VipGetViWaitFdEx(vi, arming ? VIP_WAITFD_EXPLICIT_ARM : 0, &fd) == VIP_SUCCESS);
    if (arming == 1) REQUIRE(VipArmViWaitFd(vi) == VIP_SUCCESS);
    CHECK_FALSE(vt::readable(fd, 50));
    down.put('x');
    int status = vt::wait_child(pid, 10);
    CHECK(WIFEXITED(status));
    // Readability is a state, not an event: it lasts until the program looks.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    // Arming after the death finds it, and leaves the fd readable.
    if (arming == 2) REQUIRE(VipArmViWaitFd(vi) == VIP_SUCCESS);
    CHECK(vt::readable(fd, vt::kWaitMs));
    // The program then learns what happened from the VI.
    CHECK(vt::drive_to_state(vi, VIP_STATE_ERROR, vt::kWaitMs));
    vt::destroy_vi(vi);
}

namespace {

void cq_fd_sequence(const std::string &device, bool error_callback) {
    INFO((error_callback ? "with an error callback" : "without an error callback"));
    vt::ErrorLog log;
    vt::Nic na(device), nb(device);
    if (error_callback) {
        log.install(na.nic);
        log.install(nb.nic);
    }
    vt::Memory ma(na, 1 << 20), mb(nb, 1 << 20);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(na.nic, 8, &cq) == VIP_SUCCESS);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), cq, cq);
    int fd = -1;
    REQUIRE(VipGetCQWaitFd(cq, &fd) == VIP_SUCCESS);
    CHECK_FALSE(vt::readable(fd, 50));
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    VIP_DESCRIPTOR *d;
    for (uint32_t len : {20u, 150000u}) {
        INFO("length " << len);
        vt::set_desc(ma.desc(0), ma.base + 65536, 200000, ma.mh);
        REQUIRE(VipPostRecv(p.a, ma.desc(0), ma.mh) == VIP_SUCCESS);
        CHECK(VipCQDone(cq, &vi, &recv) == VIP_NOT_DONE);
        CHECK_FALSE(vt::readable(fd, 50));
        vt::set_desc(mb.desc(0), mb.base + 65536, len, mb.mh);
        REQUIRE(VipPostSend(p.b, mb.desc(0), mb.mh) == VIP_SUCCESS);
        CHECK(vt::readable(fd, vt::kWaitMs));
        REQUIRE(VipCQDone(cq, &vi, &recv) == VIP_SUCCESS);
        CHECK(vi == p.a);
        CHECK(recv == VIP_TRUE);
        REQUIRE(VipRecvDone(p.a, &d) == VIP_SUCCESS);
        CHECK(VipCQDone(cq, &vi, &recv) == VIP_NOT_DONE);
        CHECK_FALSE(vt::readable(fd, 50));
        REQUIRE(VipSendWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
    }
    // a's own send completes on the CQ too.
    vt::set_desc(mb.desc(1), mb.base + 4096, 200, mb.mh);
    REQUIRE(VipPostRecv(p.b, mb.desc(1), mb.mh) == VIP_SUCCESS);
    vt::set_desc(ma.desc(1), ma.base + 4096, 100, ma.mh);
    REQUIRE(VipPostSend(p.a, ma.desc(1), ma.mh) == VIP_SUCCESS);
    CHECK(vt::readable(fd, vt::kWaitMs));
    REQUIRE(VipCQWait(cq, vt::kWaitMs, &vi, &recv) == VIP_SUCCESS);
    CHECK(recv == VIP_FALSE);
    REQUIRE(VipSendDone(p.a, &d) == VIP_SUCCESS);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

} // namespace

TEST_CASE("A CQ's wait fd is readable exactly when VipCQDone has an entry", "[ext][waitfd]") {
    std::string device = VT_DEVICE();
    cq_fd_sequence(device, false);
}

TEST_CASE("A CQ's wait fd works while an error callback is registered", "[ext][waitfd]") {
    std::string device = VT_DEVICE();
    cq_fd_sequence(device, true);
}

namespace {

std::atomic<int> g_signals{0};
std::atomic<int> g_reentered{-1};

void on_signal(int) {
    ++g_signals;
    // Forbidden in general; here the handler interrupted a VIPL call on this
    // thread, which the library must refuse rather than deadlock on.
    VIP_NIC_ATTRIBUTES attrs;
    g_reentered = VipQueryNic(nullptr, &attrs) == VIP_ERROR_REENTERED ? 1 : 0;
}

// Runs fn on a thread and signals that thread until fn returns.
VIP_RETURN interrupt(const std::function<VIP_RETURN()> &fn, bool restart) {
    struct sigaction sa {
    }, old{};
    sa.sa_handler = on_signal;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old);
    g_signals = 0;
    g_reentered = -1;
    std::atomic<bool> done{false};
    VIP_RETURN rc = VIP_NOT_DONE;
    std::thread t([&] {
        rc = fn();
        done = true;
    });
    auto end = Clock::now() + std::chrono::seconds(8);
    while (!done && Clock::now() < end) {
        // Long enough for the call to be asleep, past any short spin.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!done) pthread_kill(t.native_handle(), SIGUSR1);
    }
    t.join();
    sigaction(SIGUSR1, &old, nullptr);
    return rc;
}

} // namespace

TEST_CASE("Blocking calls return VIP_INTERRUPTED when a signal handler runs", "[ext][signals]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Memory ma(na, 1 << 16), mb(nb, 1 << 16);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(na.nic, 8, &cq) == VIP_SUCCESS);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, cq);
    vt::set_desc(ma.desc(0), ma.base + 4096, 64, ma.mh);
    REQUIRE(VipPostRecv(p.a, ma.desc(0), ma.mh) == VIP_SUCCESS);
    for (bool restart : {false, true}) {
        INFO((restart ? "SA_RESTART" : "no SA_RESTART"));
        VIP_DESCRIPTOR *d;
        auto start = Clock::now();
        CHECK(interrupt([&] { return VipRecvWait(p.a, 6000, &d); }, restart) == VIP_INTERRUPTED);
        CHECK(g_reentered == 1);
        CHECK(interrupt([&] { return VipSendWait(p.a, 6000, &d); }, restart) == VIP_INTERRUPTED);
        CHECK(interrupt([&] { return VipWaitViEvent(p.a, VIP_ARM_ANY, 6000); }, restart) ==
              VIP_INTERRUPTED);
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN recv;
        CHECK(interrupt([&] { return VipCQWait(cq, 6000, &vi, &recv); }, restart) ==
              VIP_INTERRUPTED);
        CHECK(g_reentered == 1);
        vt::Address local(na.nic, vt::unique_disc("-sig"));
        vt::AddressBuffer remote;
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        CHECK(
            interrupt(
                [&] { return VipConnectWait(na.nic, local.get(), 6000, remote.get(), &ra, &conn); },
                restart) == VIP_INTERRUPTED);
        CHECK(Clock::now() - start < std::chrono::seconds(20));
    }
    // Nothing was lost: a message sent now completes the receive posted before.
    memcpy(mb.base + 4096, "after", 6);
    vt::set_desc(mb.desc(0), mb.base + 4096, 6, mb.mh);
    REQUIRE(VipPostSend(p.b, mb.desc(0), mb.mh) == VIP_SUCCESS);
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    REQUIRE(VipCQWait(cq, vt::kWaitMs, &vi, &recv) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d;
    REQUIRE(VipRecvWait(p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(memcmp(ma.base + 4096, "after", 6) == 0);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("Peer and client connection waits return VIP_INTERRUPTED", "[ext][signals]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    std::string disc = vt::unique_disc("-sigp");
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    for (const char *mine : {"a", "z"}) {
        vt::Address local(n.nic, disc + mine), remote(n.nic, disc + "m");
        REQUIRE(VipConnectPeerRequest(vi, local.get(), remote.get(), 6000) == VIP_SUCCESS);
        VIP_VI_ATTRIBUTES ra;
        CHECK(interrupt([&] { return VipConnectPeerWait(vi, &ra); }, false) == VIP_INTERRUPTED);
        REQUIRE(VipDisconnect(vi) == VIP_SUCCESS);
    }
    // A client waiting for a server that never answers.
    vt::Address server(n.nic, disc + "s"), client(n.nic, disc + "c");
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    REQUIRE(VipConnectWait(n.nic, server.get(), 0, remote.get(), &ra, &conn) == VIP_TIMEOUT);
    CHECK(interrupt([&] { return VipConnectRequest(vi, client.get(), server.get(), 6000, &ra); },
                    false) == VIP_INTERRUPTED);
    CHECK(vt::vi_state(vi) == VIP_STATE_IDLE);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
}
