// Client-side connections, and their monitor for bidirectional GIOP (callbacks over a
// connection the client opened).
#include "omnivipl.h"

namespace vipl::orb {

ActiveCollection &ActiveCollection::singleton() {
    // Leaked: connections may outlive static destruction order.
    static ActiveCollection *c = new ActiveCollection;
    return *c;
}

ActiveCollection::ActiveCollection() : selector_(std::make_shared<Selector>()) {}

void ActiveCollection::added() {
    std::lock_guard lock(mu_);
    ++count_;
    active_ = true;
}

void ActiveCollection::removed() {
    std::lock_guard lock(mu_);
    --count_;
    selector_->wake();
}

CORBA::Boolean ActiveCollection::isEmpty() const {
    std::lock_guard lock(mu_);
    return count_ == 0;
}

void ActiveCollection::deactivate() {
    std::lock_guard lock(mu_);
    active_ = false;
    selector_->wake();
}

void ActiveCollection::Monitor(omni::giopConnection::notifyReadable_t func, void *cookie) {
    for (;;) {
        {
            std::lock_guard lock(mu_);
            if (!active_ || count_ == 0) return;
        }
        selector_->select(func, cookie, -1);
    }
}

ActiveConnection::ActiveConnection(Stream stream, const std::string &myaddr,
                                   const std::string &peeraddr)
    : Connection(std::move(stream), ActiveCollection::singleton().selector(), myaddr, peeraddr) {}

ActiveConnection::~ActiveConnection() {
    if (registered_) ActiveCollection::singleton().removed();
}

omni::giopActiveCollection *ActiveConnection::registerMonitor() {
    if (!registered_) {
        registered_ = true;
        ActiveCollection::singleton().added();
    }
    return &ActiveCollection::singleton();
}

} // namespace vipl::orb
