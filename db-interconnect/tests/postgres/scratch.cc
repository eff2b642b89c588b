#include "scratch.h"

#include "program.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace pgt {

namespace {

constexpr char kPrefix[] = "vipl-pg-";

int scratch_count = 0;

// The registry: fixed slots a signal handler can walk.
constexpr int kSlots = 256;
std::atomic<int> slot_pid[kSlots];
std::atomic<bool> slot_group[kSlots];

// The postmaster of a stale data folder, when it still runs there.
void kill_postmaster_of(const std::string &data) {
    std::ifstream f(data + "/postmaster.pid");
    int pid = 0;
    if (!(f >> pid) || pid <= 1) return;
    char cwd[4096];
    ssize_t n = readlink(("/proc/" + std::to_string(pid) + "/cwd").c_str(), cwd, sizeof cwd - 1);
    if (n <= 0) return;
    cwd[n] = '\0';
    if (std::filesystem::weakly_canonical(data) != std::filesystem::path(cwd)) return;
    for (int child : descendants(pid)) kill(child, SIGKILL);
    kill(pid, SIGKILL);
    wait_gone(pid, 5000);
}

} // namespace

Scratch::Scratch(const std::string &owner) {
    path_ = std::string("/tmp/") + kPrefix + std::to_string(getpid()) + "-" +
            std::to_string(++scratch_count);
    std::filesystem::remove_all(path_);
    REQUIRE(mkdir(path_.c_str(), 0755) == 0);
    chmod(path_.c_str(), 0755);
    if (!owner.empty()) give_to(path_, owner);
}

Scratch::~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

void remove_stale_scratch() {
    DIR *d = opendir("/tmp");
    if (!d) return;
    while (dirent *e = readdir(d)) {
        if (std::strncmp(e->d_name, kPrefix, sizeof kPrefix - 1) != 0) continue;
        int pid = std::atoi(e->d_name + sizeof kPrefix - 1);
        if (pid <= 0 || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
        std::string dir = std::string("/tmp/") + e->d_name;
        std::error_code ec;
        for (const auto &entry : std::filesystem::directory_iterator(dir, ec))
            if (std::filesystem::exists(entry.path() / "postmaster.pid", ec))
                kill_postmaster_of(entry.path().string());
        std::filesystem::remove_all(dir, ec);
    }
    closedir(d);
}

int free_port() {
    static int next = 20000 + (getpid() * 37) % 20000;
    for (int tries = 0; tries < 2000; ++tries) {
        int port = next;
        next = next >= 39990 ? 20000 : next + 1;
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        bool ok = bind(s, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0;
        close(s);
        if (ok) return port;
    }
    FAIL("no free TCP port in 20000..39999");
    return -1;
}

void write_file(const std::string &path, const std::string &content, const std::string &owner,
                int mode) {
    {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f << content;
        REQUIRE(f.good());
    }
    chmod(path.c_str(), static_cast<mode_t>(mode));
    if (!owner.empty()) give_to(path, owner);
}

std::string read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

void give_to(const std::string &path, const std::string &user) {
    passwd *pw = getpwnam(user.c_str());
    if (!pw) FAIL("no such user: " << user);
    REQUIRE(chown(path.c_str(), pw->pw_uid, pw->pw_gid) == 0);
}

void register_pid(int pid, bool group) {
    for (int i = 0; i < kSlots; ++i) {
        int free = 0;
        if (slot_pid[i].compare_exchange_strong(free, pid)) {
            slot_group[i] = group;
            return;
        }
    }
}

void unregister_pid(int pid) {
    for (int i = 0; i < kSlots; ++i) {
        int p = pid;
        if (slot_pid[i].compare_exchange_strong(p, 0)) return;
    }
}

void kill_registered() noexcept {
    for (int i = 0; i < kSlots; ++i) {
        int pid = slot_pid[i].load();
        if (pid <= 0) continue;
        if (slot_group[i]) kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
    }
}

} // namespace pgt
