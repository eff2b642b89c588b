// Two "hosts" for the tests across hosts: two network namespaces joined by a veth pair
// (libvipl/tests/tcp/netns.h, library vipl-test-netns).  A cluster or client runs in one
// by its namespace file; connections between them cross a real (virtual) link, so the
// interposer carries them with the tcp provider when both ends name the server in
// VIPL_DB_REMOTE.
//
// Needs root and iproute2: without them the constructor fails the test and says which
// is missing (it never passes silently).
//
// Thread rules: one thread.  Not async-signal-safe.
#pragma once

#include "netns.h"

#include <memory>
#include <string>

namespace pgt {

class Hosts {
public:
    Hosts(); // fails the test when the namespaces cannot be made
    ~Hosts();
    Hosts(const Hosts &) = delete;
    Hosts &operator=(const Hosts &) = delete;

    // Side 0 or 1: its namespace file (Launch::netns, ClusterConfig::netns) and address.
    std::string ns(int side) const { return pair_->path(side); }
    const std::string &ip(int side) const { return pair_->address(side); }
    // The setting both ends of a connection to a server on `side` need.
    std::string remote_rule(int side) const { return "VIPL_DB_REMOTE=tcp:" + ip(side) + ":*"; }

private:
    std::unique_ptr<vt::NetnsPair> pair_;
};

} // namespace pgt
