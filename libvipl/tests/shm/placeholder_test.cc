// shm-only tests live in this folder.
#include "support.h"

TEST_CASE("the shm device opens", "[shm]") {
    vt::Nic n("shm0");
    CHECK(n.attrs.NicAddressLen == 16);
}
