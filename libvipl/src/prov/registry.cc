// The built-in providers.  A new provider adds one line here.
#include "prov/provider.h"

namespace vipl {

extern const ProviderOps shm_provider;
extern const ProviderOps tcp_provider;

namespace {
const ProviderOps *const kProviders[] = {&shm_provider, &tcp_provider};
}

size_t provider_count() {
    return sizeof kProviders / sizeof kProviders[0];
}
const ProviderOps *provider_at(size_t index) {
    return kProviders[index];
}

const ProviderOps *provider_for(const char *device) {
    for (const ProviderOps *p : kProviders)
        if (p->matches(device)) return p;
    return nullptr;
}

} // namespace vipl
