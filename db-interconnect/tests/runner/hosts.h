// Two "hosts" on one machine: two network namespaces joined by a veth pair, for the
// connections that cross hosts (the interposer's VIPL_DB_REMOTE, the tcp provider).
//
// Needs root and iproute2.  Names carry the creating process's pid ("vipl-dbt<pid>-<n>a");
// the destructor deletes them, and a new pair deletes those whose creator is gone.  The
// veth ends are born inside the namespaces: nothing is left in the machine's own.
//
// Thread rules: one thread.  Not async-signal-safe.
#pragma once

#include <string>

namespace dbt {

// Why namespaces cannot be made here ("" when they can).
std::string hosts_unavailable();

class HostPair {
public:
    HostPair();  // fails the test when the namespaces cannot be made
    ~HostPair(); // deletes them
    HostPair(const HostPair &) = delete;
    HostPair &operator=(const HostPair &) = delete;

    // Side 0 or 1: the namespace's name (Spawn::netns) and its address on the veth.
    const std::string &name(int side) const { return ns_[side]; }
    const std::string &address(int side) const { return addr_[side]; }

private:
    void ip(int side, const std::string &args);
    void remove();
    std::string ns_[2], addr_[2];
    bool made_[2] = {false, false};
};

} // namespace dbt
