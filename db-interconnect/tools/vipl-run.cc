// vipl-run: runs a program, and everything it forks and execs, with the database
// interconnect preloaded; shows the configuration and the connections that ride it.
#include "config.h"

#include "../src/stats.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace vipl::db;

namespace {

void usage(FILE *out) {
    std::fprintf(out,
                 "usage: vipl-run [--] COMMAND [ARG...]  run COMMAND over the interconnect\n"
                 "       vipl-run --config               the VIPL_DB_* settings in effect\n"
                 "       vipl-run --stat [PID...]        connections that processes interpose\n"
                 "       vipl-run --library              where libvipl-db.so is\n");
}

bool exists(const std::string &p) {
    struct stat st;
    return !p.empty() && stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string self_dir() {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return "";
    buf[n] = '\0';
    std::string s(buf);
    return s.substr(0, s.rfind('/'));
}

// VIPL_RUN_LIBRARY, else beside this program (build tree) or in ../lib (installed).
std::string library() {
    if (const char *e = std::getenv("VIPL_RUN_LIBRARY"); e && *e) return e;
    std::string dir = self_dir();
    for (std::string c : {dir + "/libvipl-db.so", dir + "/../lib/libvipl-db.so",
                          std::string(VIPL_DB_INSTALL_LIBRARY), std::string(VIPL_DB_BUILD_LIBRARY)})
        if (exists(c)) return c;
    return "";
}

int show_config() {
    std::printf("%-22s %-6s %-8s %-10s %s\n", "KEY", "TYPE", "DEFAULT", "VALUE", "HELP");
    for (const ConfigKey &k : config_table()) {
        std::string var = std::string("VIPL_") + k.name;
        std::printf("%-22s %-6s %-8s %-10s %s\n", var.c_str(), k.type, k.default_value,
                    config_value(k.name).c_str(), k.help);
    }
    for (const std::string &p : config_problems())
        std::fprintf(stderr, "vipl-run: %s\n", p.c_str());
    return config_problems().empty() ? 0 : 2;
}

const char *transport_name(uint8_t t) {
    switch (static_cast<StatTransport>(t)) {
    case StatTransport::shm:
        return "shm";
    case StatTransport::tcp:
        return "tcp";
    default:
        return "kernel";
    }
}

// Prints the connections of one process; false when it has no table we may read.
bool show_process(int pid, bool header_done) {
    std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    DIR *d = opendir(dir.c_str());
    if (!d) return false;
    bool found = false;
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        std::string path = dir + "/" + e->d_name;
        char target[256];
        ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        if (std::strncmp(target, "/memfd:", 7) != 0 ||
            std::strncmp(target + 7, kStatName, std::strlen(kStatName)) != 0)
            continue;
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        size_t size = sizeof(StatHeader) + sizeof(StatSlot) * kStatSlots;
        void *p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) continue;
        auto *h = static_cast<const StatHeader *>(p);
        if (std::memcmp(h->magic, kStatMagic, sizeof kStatMagic) == 0 && h->pid == pid) {
            found = true;
            auto *slots = reinterpret_cast<const StatSlot *>(h + 1);
            for (uint32_t i = 0; i < kStatSlots && i < h->slots; ++i) {
                const StatSlot &s = slots[i];
                if (!s.in_use.load(std::memory_order_acquire)) continue;
                std::printf("%-8d %-5d %-6s %-6s %-28s %12llu %12llu %10llu %10llu %10llu %10llu "
                            "%10llu %10llu\n",
                            pid, s.fd, s.server ? "server" : "client", transport_name(s.transport),
                            s.peer[0] ? s.peer : "-",
                            static_cast<unsigned long long>(s.bytes_in.load()),
                            static_cast<unsigned long long>(s.bytes_out.load()),
                            static_cast<unsigned long long>(s.calls_in.load()),
                            static_cast<unsigned long long>(s.calls_out.load()),
                            static_cast<unsigned long long>(s.messages_in.load()),
                            static_cast<unsigned long long>(s.messages_out.load()),
                            static_cast<unsigned long long>(s.spins.load()),
                            static_cast<unsigned long long>(s.sleeps.load()));
            }
        }
        munmap(p, size);
        break;
    }
    closedir(d);
    (void)header_done;
    return found;
}

int show_stat(int argc, char **argv) {
    std::printf("%-8s %-5s %-6s %-6s %-28s %12s %12s %10s %10s %10s %10s %10s %10s\n", "PID", "FD",
                "ROLE", "TRANS", "PEER", "BYTES_IN", "BYTES_OUT", "CALLS_IN", "CALLS_OUT",
                "MSGS_IN", "MSGS_OUT", "SPINS", "SLEEPS");
    std::vector<int> pids;
    for (int i = 0; i < argc; ++i) pids.push_back(std::atoi(argv[i]));
    if (pids.empty()) {
        DIR *d = opendir("/proc");
        if (!d) return 1;
        while (dirent *e = readdir(d))
            if (e->d_name[0] >= '1' && e->d_name[0] <= '9') pids.push_back(std::atoi(e->d_name));
        closedir(d);
    }
    for (int pid : pids) show_process(pid, true);
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    int i = 1;
    if (i < argc && std::strcmp(argv[i], "--config") == 0) return show_config();
    if (i < argc && std::strcmp(argv[i], "--stat") == 0) return show_stat(argc - 2, argv + 2);
    if (i < argc && std::strcmp(argv[i], "--library") == 0) {
        std::string lib = library();
        if (lib.empty()) return 1;
        std::printf("%s\n", lib.c_str());
        return 0;
    }
    if (i < argc && (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (i < argc && std::strcmp(argv[i], "--") == 0) ++i;
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    if (!config_problems().empty()) {
        for (const std::string &p : config_problems())
            std::fprintf(stderr, "vipl-run: %s\n", p.c_str());
        return 2;
    }
    std::string lib = library();
    if (lib.empty()) {
        std::fprintf(stderr, "vipl-run: cannot find libvipl-db.so (set VIPL_RUN_LIBRARY)\n");
        return 2;
    }
    std::string preload = lib;
    if (const char *old = std::getenv("LD_PRELOAD"); old && *old) preload += ":" + std::string(old);
    setenv("LD_PRELOAD", preload.c_str(), 1);
    execvp(argv[i], argv + i);
    std::fprintf(stderr, "vipl-run: %s: %s\n", argv[i], std::strerror(errno));
    return 127;
}
