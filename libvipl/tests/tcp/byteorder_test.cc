// Byte-order neutrality of the tcp provider with a real big-endian peer: the
// byte-order peer (peer/vipl_byteorder_peer.cc) cross-built for s390x runs
// under qemu-user against the same program built for this host, once as
// client and once as server.  Both directions carry sends with immediate data,
// RDMA writes with and without it and RDMA reads, checked byte for byte by
// the side that receives, is written into or reads.  A missing cross
// toolchain or emulator fails the test: scripts/install-deps.sh provides them.
#include "support.h"

#include <bit>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <spawn.h>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char **environ;

namespace {

#ifdef VIPL_BYTEORDER_MISSING
constexpr const char *kMissing = VIPL_BYTEORDER_MISSING;
constexpr const char *kS390xPeer = "";
constexpr const char *kQemu = "";
#else
constexpr const char *kMissing = nullptr;
constexpr const char *kS390xPeer = VIPL_BYTEORDER_S390X_PEER;
constexpr const char *kQemu = VIPL_QEMU_S390X;
#endif

// The peers bound each wait (kPeerWaitMs) and their whole run (20 s less
// than kDeadlineS) themselves; at kDeadlineS this test kills them.
constexpr int kPeerWaitMs = 60000;
constexpr int kDeadlineS = 240;

const char *native_order() {
    return std::endian::native == std::endian::big ? "big" : "little";
}

bool executable(const char *path) {
    return path && *path && access(path, X_OK) == 0;
}

pid_t spawn(const std::vector<std::string> &argv) {
    std::vector<char *> args;
    for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ);
    INFO("posix_spawn " << argv[0] << ": " << strerror(rc));
    REQUIRE(rc == 0);
    return pid;
}

// Waits for both; once one has failed, the other gets a few seconds to say
// what it saw, then is killed, and so are both at the deadline.  Returns the
// statuses as from waitpid, -1 for a child killed here.
std::pair<int, int> wait_both(pid_t a, pid_t b) {
    pid_t pid[2] = {a, b};
    int status[2] = {0, 0};
    bool done[2] = {false, false};
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(kDeadlineS);
    while (!done[0] || !done[1]) {
        for (int i = 0; i < 2; ++i) {
            if (done[i]) continue;
            pid_t r = waitpid(pid[i], &status[i], WNOHANG);
            if (r == pid[i] || (r < 0 && errno != EINTR)) {
                done[i] = true;
                if (r < 0) status[i] = -1;
                bool failed = r < 0 || !WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0;
                auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                if (failed && grace < end) end = grace;
            }
        }
        if (std::chrono::steady_clock::now() > end) {
            for (int i = 0; i < 2; ++i)
                if (!done[i]) {
                    kill(pid[i], SIGKILL);
                    waitpid(pid[i], &status[i], 0);
                    status[i] = -1;
                    done[i] = true;
                }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return {status[0], status[1]};
}

enum class Build { native, s390x };

std::vector<std::string> peer_command(Build build, const char *role, const std::string &disc,
                                      const char *peer_order) {
    std::vector<std::string> argv;
    if (build == Build::s390x) {
        argv = {kQemu, kS390xPeer};
    } else {
        argv = {VIPL_BYTEORDER_NATIVE_PEER};
    }
    for (const char *a : {role, "--disc"}) argv.push_back(a);
    argv.push_back(disc);
    for (const char *a : {"--device", "tcp:127.0.0.1", "--host", "127.0.0.1", "--expect-peer"})
        argv.push_back(a);
    argv.push_back(peer_order);
    argv.push_back("--timeout-ms");
    argv.push_back(std::to_string(kPeerWaitMs));
    argv.push_back("--deadline-s");
    argv.push_back(std::to_string(kDeadlineS - 20));
    return argv;
}

void run_pair(Build server, Build client) {
    if (server == Build::s390x || client == Build::s390x) {
        if (kMissing) FAIL(kMissing);
        INFO("s390x peer " << kS390xPeer << ", emulator " << kQemu
                           << ": run scripts/install-deps.sh and build again");
        REQUIRE(executable(kQemu));
        REQUIRE(executable(kS390xPeer));
    }
    REQUIRE(executable(VIPL_BYTEORDER_NATIVE_PEER));
    auto order = [](Build b) { return b == Build::s390x ? "big" : native_order(); };
    std::string disc = vt::unique_disc("-byteorder");
    pid_t s = spawn(peer_command(server, "--server", disc, order(client)));
    pid_t c = spawn(peer_command(client, "--client", disc, order(server)));
    auto [ss, cs] = wait_both(s, c);
    auto text = [](int st) { return st == -1 ? std::string("killed") : vt::status_text(st); };
    INFO("server: " << text(ss) << ", client: " << text(cs));
    CHECK(ss == 0);
    CHECK(cs == 0);
}

} // namespace

TEST_CASE("byteorder: the peer program passes against itself on this host", "[byteorder]") {
    run_pair(Build::native, Build::native);
}

TEST_CASE("byteorder: big-endian s390x client against a native server", "[byteorder]") {
    run_pair(Build::native, Build::s390x);
}

TEST_CASE("byteorder: native client against a big-endian s390x server", "[byteorder]") {
    run_pair(Build::s390x, Build::native);
}
