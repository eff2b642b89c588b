#include "library.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace vipl::db::tools {

namespace {

bool is_file(const std::string &p) {
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

} // namespace

std::string library_path() {
    if (const char *e = std::getenv("VIPL_RUN_LIBRARY"); e && *e) return e;
    std::string dir = self_dir();
    for (std::string c : {dir + "/libvipl-db.so", dir + "/../lib/libvipl-db.so",
                          std::string(VIPL_DB_INSTALL_LIBRARY), std::string(VIPL_DB_BUILD_LIBRARY)})
        if (is_file(c)) return c;
    return "";
}

} // namespace vipl::db::tools
