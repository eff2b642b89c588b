// The echo server of the tests: ORB options from the command line; prints its IOR on
// stdout, serves until shutdown() or a signal.  Object key "Echo" (omniINSPOA), so the
// IOR stays valid across a restart on the same endpoints.
#include "echo.hh"

#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <thread>
#include <unistd.h>

namespace {

struct Stats {
    uint64_t accepted, connected;
};

long long vipl_accepted() {
    using Fn = void (*)(Stats *);
    auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "vipl_omni_get_stats"));
    if (!fn) return -1;
    Stats s{};
    fn(&s);
    return static_cast<long long>(s.accepted);
}

class EchoImpl : public POA_EchoTest::Echo {
public:
    explicit EchoImpl(CORBA::ORB_ptr orb) : orb_(CORBA::ORB::_duplicate(orb)) {}
    void ping() override {}
    EchoTest::Bytes *bounce(const EchoTest::Bytes &data) override {
        return new EchoTest::Bytes(data);
    }
    CORBA::LongLong viplAccepted() override { return vipl_accepted(); }
    void sleepMs(CORBA::ULong ms) override { usleep(ms * 1000); }
    void shutdown() override { orb_->shutdown(0); }

private:
    CORBA::ORB_var orb_;
};

} // namespace

int main(int argc, char **argv) {
    alarm(120); // a test server never outlives its test
    try {
        CORBA::ORB_var orb = CORBA::ORB_init(argc, argv);
        CORBA::Object_var obj = orb->resolve_initial_references("omniINSPOA");
        PortableServer::POA_var poa = PortableServer::POA::_narrow(obj);
        PortableServer::ObjectId_var id = PortableServer::string_to_ObjectId("Echo");
        EchoImpl *servant = new EchoImpl(orb);
        poa->activate_object_with_id(id, servant);
        obj = poa->id_to_reference(id);
        PortableServer::POAManager_var pm = poa->the_POAManager();
        pm->activate();
        CORBA::String_var ior = orb->object_to_string(obj);
        printf("%s\n", ior.in());
        fflush(stdout);
        orb->run();
        orb->destroy();
        servant->_remove_ref();
    } catch (CORBA::Exception &e) {
        fprintf(stderr, "echo-server: %s\n", e._name());
        return 1;
    }
    return 0;
}
