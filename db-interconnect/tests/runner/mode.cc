#include "mode.h"

#include <cstdlib>
#include <cstring>

namespace dbt {

bool preloaded() {
    static const bool p = [] {
        const char *e = std::getenv("VIPL_DB_TEST_PLAIN");
        return !(e && std::strcmp(e, "1") == 0);
    }();
    return p;
}

const std::string &vipl_run() {
    static const std::string s = VIPL_DB_TEST_VIPL_RUN;
    return s;
}

const std::string &python() {
    static const std::string s = "/usr/bin/python3";
    return s;
}

std::string source_file(const std::string &relative) {
    return std::string(VIPL_DB_TEST_SOURCE) + "/" + relative;
}

std::vector<std::string> script(const std::string &name) {
    return {python(), source_file("programs/" + name)};
}

const char *riding() {
    return preloaded() ? "shm" : "kernel";
}

} // namespace dbt
