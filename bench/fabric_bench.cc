// libfabric's shm provider (RDM endpoints, untagged messages), polled as
// libfabric programs usually do; on a shared CPU the poller yields.  The
// Debian package ships fi_pingpong (latency only), so bandwidth is measured
// here with the same windowed credit scheme as libvipl: the receiver has
// 2*window receives posted and returns `window` credits in a 0-byte message
// carrying remote CQ data kCredit; kAck ends a stream.
#include "harness.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace {

using namespace bench;

constexpr uint64_t kCredit = 3;
constexpr uint64_t kAck = 2;

void fi_check(const char *what, long rc) {
    if (rc < 0) fail("%s: %s", what, fi_strerror(static_cast<int>(-rc)));
}

class FabricPeer : public Peer {
public:
    FabricPeer(const Options &o, int ctl)
        : window_(o.window), same_(o.same_cpu()), sbuf_(std::max<uint64_t>(o.max_size(), 1)),
          rbuf_(std::max<uint64_t>(o.max_size(), 1)), ctx_(2 * o.window) {
        fi_info *hints = fi_allocinfo();
        hints->ep_attr->type = FI_EP_RDM;
        hints->caps = FI_MSG;
        hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
        hints->fabric_attr->prov_name = strdup("shm");
        fi_check("fi_getinfo", fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info_));
        fi_freeinfo(hints);
        if (info_->domain_attr->mr_mode & FI_MR_LOCAL) fail("shm wants local registration");
        if (info_->domain_attr->cq_data_size < 4) fail("shm without remote CQ data");
        fi_check("fi_fabric", fi_fabric(info_->fabric_attr, &fabric_, nullptr));
        fi_check("fi_domain", fi_domain(fabric_, info_, &domain_, nullptr));
        fi_cq_attr cq_attr{};
        cq_attr.format = FI_CQ_FORMAT_DATA;
        cq_attr.size = 1024;
        fi_check("fi_cq_open", fi_cq_open(domain_, &cq_attr, &txcq_, nullptr));
        fi_check("fi_cq_open", fi_cq_open(domain_, &cq_attr, &rxcq_, nullptr));
        fi_av_attr av_attr{};
        av_attr.type = FI_AV_TABLE;
        fi_check("fi_av_open", fi_av_open(domain_, &av_attr, &av_, nullptr));
        fi_check("fi_endpoint", fi_endpoint(domain_, info_, &ep_, nullptr));
        fi_check("fi_ep_bind", fi_ep_bind(ep_, &txcq_->fid, FI_TRANSMIT));
        fi_check("fi_ep_bind", fi_ep_bind(ep_, &rxcq_->fid, FI_RECV));
        fi_check("fi_ep_bind", fi_ep_bind(ep_, &av_->fid, 0));
        fi_check("fi_enable", fi_enable(ep_));
        for (size_t i = 0; i < ctx_.size(); ++i) post_recv(static_cast<int>(i));

        // Both write their address, then read the other's: it fits in the socket buffer.
        uint8_t name[256];
        size_t len = sizeof name;
        fi_check("fi_getname", fi_getname(&ep_->fid, name, &len));
        uint64_t l = len;
        ctl_write(ctl, &l, sizeof l);
        ctl_write(ctl, name, len);
        ctl_read(ctl, &l, sizeof l);
        if (l > sizeof name) fail("peer address too long");
        ctl_read(ctl, name, l);
        if (fi_av_insert(av_, name, 1, &peer_, 0, nullptr) != 1) fail("fi_av_insert failed");
    }
    ~FabricPeer() override {
        fi_close(&ep_->fid);
        fi_close(&av_->fid);
        fi_close(&rxcq_->fid);
        fi_close(&txcq_->fid);
        fi_close(&domain_->fid);
        fi_close(&fabric_->fid);
        fi_freeinfo(info_);
    }

    void ping(uint64_t size) override {
        send(size, 0);
        fi_cq_data_entry e = wait_recv();
        repost(e);
        wait_sends(0);
    }
    void pong(uint64_t) override {
        fi_cq_data_entry e = wait_recv();
        repost(e);
        send(e.len, 0);
    }
    void stream_out(uint64_t size, long n) override {
        long credits = 2L * window_;
        for (long k = 0; k < n; ++k) {
            while (credits == 0) {
                fi_cq_data_entry e = wait_recv();
                if (data_of(e) != kCredit) fail("fabric: expected a credit message");
                repost(e);
                credits += window_;
            }
            wait_sends(window_ - 1);
            send(size, 0);
            --credits;
        }
        wait_sends(0);
        for (;;) {
            fi_cq_data_entry e = wait_recv();
            uint64_t d = data_of(e);
            repost(e);
            if (d == kAck) break;
        }
    }
    void stream_in(uint64_t, long n) override {
        for (long i = 1; i <= n; ++i) {
            fi_cq_data_entry e = wait_recv();
            repost(e);
            if (i % window_ == 0 && i < n) send(0, kCredit);
        }
        send(0, kAck);
        wait_sends(0);
    }

private:
    static uint64_t data_of(const fi_cq_data_entry &e) {
        return (e.flags & FI_REMOTE_CQ_DATA) ? e.data : 0;
    }
    void post_recv(int i) {
        for (;;) {
            ssize_t rc =
                fi_recv(ep_, rbuf_.data(), rbuf_.size(), nullptr, FI_ADDR_UNSPEC, &ctx_[i]);
            if (rc != -FI_EAGAIN) return fi_check("fi_recv", rc);
            drain_tx();
        }
    }
    void repost(const fi_cq_data_entry &e) {
        post_recv(static_cast<int>(static_cast<fi_context2 *>(e.op_context) - ctx_.data()));
    }
    void send(uint64_t size, uint64_t data) {
        for (;;) {
            ssize_t rc = data ? fi_senddata(ep_, sbuf_.data(), size, nullptr, data, peer_, nullptr)
                              : fi_send(ep_, sbuf_.data(), size, nullptr, peer_, nullptr);
            if (rc == 0) break;
            if (rc != -FI_EAGAIN) fi_check("fi_send", rc);
            drain_tx();
            poll_rx_progress();
            relax(same_);
        }
        ++tx_posted_;
    }
    void drain_tx() {
        fi_cq_data_entry e[16];
        ssize_t n = fi_cq_read(txcq_, e, 16);
        if (n > 0)
            tx_done_ += n;
        else if (n != -FI_EAGAIN)
            cq_error(txcq_, n);
    }
    // Progress is manual: reading the receive CQ moves data, but completions
    // found there must be kept for wait_recv.
    void poll_rx_progress() {
        if (have_pending_) return;
        ssize_t n = fi_cq_read(rxcq_, &pending_, 1);
        if (n == 1)
            have_pending_ = true;
        else if (n != -FI_EAGAIN)
            cq_error(rxcq_, n);
    }
    void wait_sends(long allowed) {
        while (tx_posted_ - tx_done_ > allowed) {
            drain_tx();
            if (tx_posted_ - tx_done_ > allowed) {
                poll_rx_progress();
                relax(same_);
            }
        }
    }
    fi_cq_data_entry wait_recv() {
        for (;;) {
            if (have_pending_) {
                have_pending_ = false;
                return pending_;
            }
            poll_rx_progress();
            if (have_pending_) continue;
            drain_tx();
            relax(same_);
        }
    }
    [[noreturn]] void cq_error(fid_cq *cq, ssize_t n) {
        if (n == -FI_EAVAIL) {
            fi_cq_err_entry err{};
            fi_cq_readerr(cq, &err, 0);
            fail("completion error: %s", fi_strerror(err.err));
        }
        fail("fi_cq_read: %s", fi_strerror(static_cast<int>(-n)));
    }

    int window_;
    bool same_;
    std::vector<uint8_t> sbuf_, rbuf_;
    std::vector<fi_context2> ctx_;
    fi_info *info_ = nullptr;
    fid_fabric *fabric_ = nullptr;
    fid_domain *domain_ = nullptr;
    fid_cq *txcq_ = nullptr, *rxcq_ = nullptr;
    fid_av *av_ = nullptr;
    fid_ep *ep_ = nullptr;
    fi_addr_t peer_ = FI_ADDR_UNSPEC;
    long tx_posted_ = 0, tx_done_ = 0;
    fi_cq_data_entry pending_{};
    bool have_pending_ = false;
};

class FabricTransport : public Transport {
public:
    std::unique_ptr<Peer> open(const Options &o, bool, int ctl) override {
        return std::make_unique<FabricPeer>(o, ctl);
    }
};

} // namespace

int main(int argc, char **argv) {
    Options o = parse_options(argc, argv);
    FabricTransport t;
    return run(o, t);
}
