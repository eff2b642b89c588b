// This host's identity: a same-host (shm) address in an IOR is used only by processes
// whose identity matches, so another host, or this host after a reboot, ignores it.
#include "omnivipl.h"

#include <fstream>
#include <unistd.h>

namespace vipl::orb {

const std::string &host_name() {
    static const std::string name = [] {
        char buf[256] = {};
        if (gethostname(buf, sizeof buf - 1) != 0) return std::string("localhost");
        return std::string(buf);
    }();
    return name;
}

const std::string &host_identity() {
    static const std::string id = [] {
        std::string boot;
        std::ifstream f("/proc/sys/kernel/random/boot_id");
        std::getline(f, boot);
        return host_name() + "/" + boot;
    }();
    return id;
}

} // namespace vipl::orb
