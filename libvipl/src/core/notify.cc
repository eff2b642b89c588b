#include "core/notify.h"
#include "core/fds.h"

#include "core/cq.h"
#include "core/lifecycle.h"
#include "core/log.h"
#include "core/vi.h"
#include "core/vi_guard.h"
#include "core/wait.h"
#include "prov/provider.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <vector>

namespace vipl {
namespace {

struct Notifier {
    Mutex lock;
    bool running = false;
    int epfd = -1;
    int efd = -1;
    std::vector<void *> vis;   // VI handles with a Notify handler
    std::vector<void *> cqs;   // CQ handles with a Notify handler
    std::vector<Nic *> errors; // NICs with queued errors
};

// Never destroyed: the thread is never stopped and runs on while exit()
// destroys static objects (a hang-up it sees then is reported through g).
union Immortal {
    Notifier n;
    Immortal() : n() {}
    ~Immortal() {}
} g_immortal;
Notifier &g = g_immortal.n;

void poke_locked() {
    eventfd_ring(g.efd);
}

void add_fd(int fd, void *handle) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = reinterpret_cast<uint64_t>(handle);
    if (epoll_ctl(g.epfd, EPOLL_CTL_ADD, fd, &ev) < 0 && errno == EEXIST)
        epoll_ctl(g.epfd, EPOLL_CTL_MOD, fd, &ev);
}

// The transport's hang-up descriptors of a connected VI: for a hang-up only,
// never for data (the program's own calls take that).
void watch_vi_fds(Vi *vi, bool add) {
    void *h = vis().handle_of(vi);
    pollfd fds[4];
    int n = 0;
    if (vi->prov) n = vi->nic->ops->vi->wait_fds(vi, fds, 4);
    for (int i = 0; i < n; ++i) {
        if (!(fds[i].events & POLLRDHUP)) continue;
        if (!add) {
            epoll_ctl(g.epfd, EPOLL_CTL_DEL, fds[i].fd, nullptr);
            continue;
        }
        epoll_event ev{};
        ev.events = EPOLLRDHUP;
        ev.data.u64 = reinterpret_cast<uint64_t>(h);
        if (epoll_ctl(g.epfd, EPOLL_CTL_ADD, fds[i].fd, &ev) < 0 && errno == EEXIST)
            epoll_ctl(g.epfd, EPOLL_CTL_MOD, fds[i].fd, &ev);
    }
}

// The VI's doorbell, only while a Notify handler waits: otherwise the thread
// would take wake-ups meant for a program polling the VI's wait fd.
void watch_doorbell(Vi *vi, void *h, bool add) {
    auto it = std::find(g.vis.begin(), g.vis.end(), h);
    if (add && it == g.vis.end()) {
        g.vis.push_back(h);
        add_fd(vi->efd, h);
    } else if (!add && it != g.vis.end()) {
        g.vis.erase(it);
        epoll_ctl(g.epfd, EPOLL_CTL_DEL, vi->efd, nullptr);
    }
}

void deliver_errors() {
    std::vector<Nic *> nics;
    {
        std::lock_guard<Mutex> l(g.lock);
        nics.swap(g.errors);
    }
    for (Nic *nic : nics) {
        for (;;) {
            VIP_ERROR_DESCRIPTOR err;
            ErrorHandler handler;
            VIP_PVOID ctx;
            {
                std::lock_guard<Mutex> l(nic->error_lock);
                if (nic->errors.empty()) break;
                err = nic->errors.front();
                nic->errors.pop_front();
                handler = nic->error_handler;
                ctx = nic->error_context;
            }
            if (handler) handler(ctx, &err);
        }
    }
}

// Runs the handlers whose queue has a completion; true if any ran.
bool deliver_notifies() {
    std::vector<void *> vi_list, cq_list;
    {
        std::lock_guard<Mutex> l(g.lock);
        vi_list = g.vis;
        cq_list = g.cqs;
    }
    bool ran = false;
    for (void *h : vi_list) {
        Vi *vi = vis().lookup(h);
        if (!vi) continue;
        for (bool recv : {false, true}) {
            decltype(WorkQueue::notify) handler = nullptr;
            VIP_PVOID ctx = nullptr;
            VIP_DESCRIPTOR *desc = nullptr;
            {
                ViGuard l(vi);
                if (!vis().still(vi, h)) break;
                WorkQueue &q = recv ? vi->rq : vi->sq;
                if (!q.notify) continue;
                if (q.head == q.visible) vi_progress(vi);
                if (q.head == q.visible) continue;
                desc = q.at(q.head).desc;
                __atomic_store_n(&q.head, q.head + 1, __ATOMIC_RELAXED);
                handler = q.notify;
                ctx = q.notify_context;
                q.notify = nullptr;
            }
            handler(ctx, nics().handle_of(vi->nic), h, desc);
            ran = true;
        }
    }
    for (void *h : cq_list) {
        Cq *cq = cqs().lookup(h);
        if (!cq) continue;
        decltype(Cq::notify) handler;
        VIP_PVOID ctx;
        {
            std::lock_guard<Mutex> l(cq->lock);
            handler = cq->notify;
            ctx = cq->notify_context;
        }
        if (!handler) continue;
        VIP_VI_HANDLE vh;
        VIP_BOOLEAN recv;
        if (cq_done(cq, h, &vh, &recv) != VIP_SUCCESS) continue;
        {
            std::lock_guard<Mutex> l(cq->lock);
            cq->notify = nullptr;
        }
        handler(ctx, nics().handle_of(cq->nic), vh, recv);
        ran = true;
    }
    // Forget targets whose handlers have all run.
    for (void *h : vi_list)
        if (Vi *vi = vis().lookup(h)) {
            ViGuard vl(vi);
            if (!vis().still(vi, h) || vi->sq.notify || vi->rq.notify) continue;
            std::lock_guard<Mutex> l(g.lock);
            watch_doorbell(vi, h, false);
        }
    std::lock_guard<Mutex> l(g.lock);
    auto gone_vi = [](void *h) { return !vis().lookup(h); };
    g.vis.erase(std::remove_if(g.vis.begin(), g.vis.end(), gone_vi), g.vis.end());
    auto gone_cq = [](void *h) {
        Cq *cq = cqs().lookup(h);
        if (cq && cq->notify) return false;
        if (cq) epoll_ctl(g.epfd, EPOLL_CTL_DEL, cq->epfd, nullptr);
        return true;
    };
    g.cqs.erase(std::remove_if(g.cqs.begin(), g.cqs.end(), gone_cq), g.cqs.end());
    return ran;
}

void arm_targets() {
    std::vector<void *> vi_list, cq_list;
    {
        std::lock_guard<Mutex> l(g.lock);
        vi_list = g.vis;
        cq_list = g.cqs;
    }
    for (void *h : vi_list)
        if (Vi *vi = vis().lookup(h)) {
            ViGuard l(vi);
            if (vis().still(vi, h)) vi_arm(vi);
        }
    for (void *h : cq_list)
        if (Cq *cq = cqs().lookup(h)) cq_arm_members(cq);
}

void handle_event(uint64_t data) {
    if (data == 0) {
        eventfd_drain(g.efd);
        return;
    }
    void *h = reinterpret_cast<void *>(data);
    if ((data >> 56) == static_cast<uint64_t>(HandleTag::cq)) {
        if (Cq *cq = cqs().lookup(h)) {
            InUse in_use(cq->users);
            if (cqs().still(cq, h)) cq_handle_wakeups(cq);
        }
        return;
    }
    Vi *vi = vis().lookup(h);
    if (!vi) return;
    ViGuard l(vi);
    if (!vis().still(vi, h)) return;
    if (vi->sq.notify || vi->rq.notify) vi_drain(vi); // the doorbell is ours only then
    if (vi->prov) vi->nic->ops->vi->check_peer(vi);
    vi_progress(vi);
    if (vi->prov) vi->nic->ops->vi->idle(vi);
}

void *thread_main(void *) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr); // program signals go to program threads
    epoll_event evs[64];
    for (;;) {
        deliver_errors();
        if (deliver_notifies()) continue;
        arm_targets();
        {
            std::lock_guard<Mutex> l(g.lock);
            if (!g.errors.empty()) continue;
        }
        if (deliver_notifies()) continue;
        int n = epoll_wait(g.epfd, evs, 64, 100);
        for (int i = 0; i < n; ++i) handle_event(evs[i].data.u64);
    }
    return nullptr;
}

} // namespace

bool notifier_running() {
    std::lock_guard<Mutex> l(g.lock);
    return g.running;
}

VIP_RETURN notifier_start() {
    {
        std::lock_guard<Mutex> l(g.lock);
        if (g.running) return VIP_SUCCESS;
        g.epfd = fd_track(epoll_create1(EPOLL_CLOEXEC));
        g.efd = fd_track(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
        if (g.epfd < 0 || g.efd < 0) {
            VIPL_ERROR("cannot start the notification thread: %s", strerror(errno));
            if (g.epfd >= 0) fd_close(g.epfd);
            if (g.efd >= 0) fd_close(g.efd);
            g.epfd = g.efd = -1;
            return VIP_ERROR_RESOURCE;
        }
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = 0;
        epoll_ctl(g.epfd, EPOLL_CTL_ADD, g.efd, &ev);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        pthread_t tid;
        int rc = pthread_create(&tid, &attr, thread_main, nullptr);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            VIPL_ERROR("cannot start the notification thread: %s", strerror(rc));
            fd_close(g.epfd);
            fd_close(g.efd);
            g.epfd = g.efd = -1;
            return VIP_ERROR_RESOURCE;
        }
        pthread_setname_np(tid, "vipl-notify");
        g.running = true;
    }
    // Watch what is already connected, so that a dead peer is reported at once.
    vis().for_each([](Vi *vi) {
        ViGuard l(vi);
        if (vis().alive(vi) && vi->usable_here() && vi->prov &&
            vi->state.load() == VIP_STATE_CONNECTED)
            notifier_watch_vi(vi, true);
    });
    return VIP_SUCCESS;
}

bool notifier_post_error(Nic *nic, const VIP_ERROR_DESCRIPTOR &err) {
    {
        std::lock_guard<Mutex> l(nic->error_lock);
        if (!nic->error_handler) return false;
        nic->errors.push_back(err);
    }
    std::lock_guard<Mutex> l(g.lock);
    if (std::find(g.errors.begin(), g.errors.end(), nic) == g.errors.end()) g.errors.push_back(nic);
    if (g.running) poke_locked();
    return true;
}

void notifier_poke() {
    std::lock_guard<Mutex> l(g.lock);
    if (g.running) poke_locked();
}

void notifier_watch_vi(Vi *vi, bool add) {
    bool has_notify = vi->sq.notify || vi->rq.notify;
    std::lock_guard<Mutex> l(g.lock);
    if (!g.running) return;
    bool connected = vi->state.load() == VIP_STATE_CONNECTED;
    bool transport = add && connected;
    if (transport != vis().local(vi).watched) {
        vis().local(vi).watched = transport;
        watch_vi_fds(vi, transport);
    }
    watch_doorbell(vi, vis().handle_of(vi), add && has_notify);
    poke_locked();
}

void notifier_forget_fds(Vi *vi, const int *fds, int n) {
    std::lock_guard<Mutex> l(g.lock);
    if (!g.running || !vis().local(vi).watched) return;
    vis().local(vi).watched = false;
    for (int i = 0; i < n; ++i)
        if (fds[i] >= 0) epoll_ctl(g.epfd, EPOLL_CTL_DEL, fds[i], nullptr);
}

void notifier_watch_cq(Cq *cq, bool add) {
    std::lock_guard<Mutex> l(g.lock);
    if (!g.running) return;
    void *h = cqs().handle_of(cq);
    // The CQ's poll set holds its doorbell and its members': one descriptor to watch.
    if (add) {
        add_fd(cq->epfd, h);
        if (std::find(g.cqs.begin(), g.cqs.end(), h) == g.cqs.end()) g.cqs.push_back(h);
    } else {
        epoll_ctl(g.epfd, EPOLL_CTL_DEL, cq->epfd, nullptr);
        g.cqs.erase(std::remove(g.cqs.begin(), g.cqs.end(), h), g.cqs.end());
    }
    poke_locked();
}

void notifier_lock_for_fork() {
    g.lock.lock();
}
void notifier_unlock_after_fork() {
    g.lock.unlock();
}

void notifier_forget_after_fork() {
    // Only the forking thread exists in the child; its descriptors were closed
    // with the library's others (fd_close_all_inherited).
    new (&g) Notifier();
}

} // namespace vipl
