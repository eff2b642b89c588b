#include "hosts.h"

#include <catch2/catch.hpp>

namespace pgt {

Hosts::Hosts() {
    std::string missing = vt::netns_unavailable();
    if (!missing.empty())
        FAIL("this test needs two network namespaces, which need root and iproute2 (`ip`): "
             << missing);
    std::string error;
    pair_ = std::make_unique<vt::NetnsPair>(&error);
    if (!pair_->ok()) FAIL("the network namespaces could not be made: " << error);
}

Hosts::~Hosts() = default;

} // namespace pgt
