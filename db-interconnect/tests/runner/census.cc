#include "census.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

namespace dbt {

Census census(int pid) {
    Census c;
    std::string base = "/proc/" + std::to_string(pid);
    DIR *d = opendir((base + "/fd").c_str());
    if (!d) FAIL("cannot read " << base << "/fd");
    std::vector<std::pair<int, std::string>> fds;
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        char target[512];
        ssize_t n = readlink((base + "/fd/" + e->d_name).c_str(), target, sizeof target - 1);
        if (n < 0) continue;
        target[n] = '\0';
        fds.emplace_back(std::atoi(e->d_name), target);
    }
    closedir(d);
    std::sort(fds.begin(), fds.end());
    for (auto &[fd, target] : fds) {
        ++c.fds;
        if (target.rfind("/memfd:", 0) == 0) ++c.memfd_fds;
        c.fd_list += std::to_string(fd) + " -> " + target + "\n";
    }
    std::ifstream maps(base + "/maps");
    std::string line;
    while (std::getline(maps, line)) {
        ++c.maps;
        if (line.find("/memfd:") != std::string::npos) ++c.memfd_maps;
        // address perms offset dev inode [pathname]: no sixth field, no file.
        std::istringstream f(line);
        std::string field;
        int fields = 0;
        while (fields < 6 && f >> field) ++fields;
        if (fields < 6) ++c.anon_maps;
        std::string rest;
        std::getline(f, rest);
        c.files.push_back(fields < 6 ? "" : field + rest);
    }
    std::ifstream status(base + "/status");
    while (std::getline(status, line))
        if (line.rfind("Threads:", 0) == 0) c.threads = std::atoi(line.c_str() + 8);
    return c;
}

bool same_holdings(const Census &a, const Census &b) {
    int anon = a.anon_maps - b.anon_maps;
    return a.fds == b.fds && a.memfd_fds == b.memfd_fds && a.memfd_maps == b.memfd_maps &&
           a.maps - a.anon_maps == b.maps - b.anon_maps && a.threads == b.threads &&
           anon <= kAnonSlack && anon >= -kAnonSlack;
}

std::string describe(const Census &c) {
    std::ostringstream o;
    o << c.fds << " fds (" << c.memfd_fds << " memfd), " << c.maps << " mappings (" << c.memfd_maps
      << " memfd, " << c.anon_maps << " anonymous), " << c.threads << " threads";
    return o.str();
}

std::string mapping_changes(const Census &a, const Census &b) {
    std::map<std::string, int> count;
    for (const std::string &f : a.files) --count[f];
    for (const std::string &f : b.files) ++count[f];
    std::ostringstream o;
    for (auto &[file, n] : count)
        if (n) o << (n > 0 ? "+" : "") << n << " " << (file.empty() ? "(anonymous)" : file) << "\n";
    return o.str();
}

std::vector<std::string> dev_shm(const std::string &part) {
    std::vector<std::string> v;
    if (DIR *d = opendir("/dev/shm")) {
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.' && std::string(e->d_name).find(part) != std::string::npos)
                v.emplace_back(e->d_name);
        closedir(d);
    }
    std::sort(v.begin(), v.end());
    return v;
}

} // namespace dbt
