// common/'s Stream over libvipl, latency and bandwidth, so that the stream's own cost
// shows beside raw libvipl (bench-vipl) and the sockets (bench-sock):
//   --variant stream  blocking Stream::read/write (what the socket interposer does)
//   --variant asio    AsioStream: async_write then async_read on an io_context per round
//                     trip, as an Asio program would
// over the shm provider (vipl+shm://127.0.0.1).  Spinning follows the stream's own
// setting (VIPL_STREAM_SPIN_US; 0 sleeps at once).  A stream cannot carry an empty
// message, so size 0 moves one byte, as bench-sock does.
#include "harness.h"

#include "vipl/asio_stream.h"
#include "vipl/stream.h"
#include "vipl/stream_config.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace bench {
namespace {

constexpr auto kSetup = std::chrono::seconds(20);

std::string where(uint16_t port) {
    return "vipl+shm://127.0.0.1:" + std::to_string(port);
}

// A peer that streams by whole messages, put or got one at a time, the last one
// answered by a byte.
class MessagePeer : public Peer {
public:
    void stream_out(uint64_t size, long n) override {
        for (long k = 0; k < n; ++k) put(size);
        get(1);
    }
    void stream_in(uint64_t size, long n) override {
        for (long k = 0; k < n; ++k) get(size);
        put(1);
    }

protected:
    virtual void put(uint64_t size) = 0;
    virtual void get(uint64_t size) = 0;
};

// The blocking calls, as the interposer makes them.
class StreamPeer : public MessagePeer {
public:
    StreamPeer(vipl::Stream s, uint64_t max) : s_(std::move(s)), buf_(std::max<uint64_t>(max, 1)) {}
    ~StreamPeer() override { close(); }
    void close() override {
        if (s_) s_.close(vipl::deadline_in(std::chrono::seconds(5)));
    }
    void ping(uint64_t size) override {
        put(size);
        get(size);
    }
    void pong(uint64_t size) override {
        get(size);
        put(size);
    }
    Counters counters() override {
        vipl::StreamCounters c = s_.counters();
        return {c.doorbells, c.spin_wins, c.sleeps};
    }

private:
    void put(uint64_t size) override {
        size_t n = std::max<uint64_t>(size, 1), done = 0;
        std::error_code ec;
        while (done < n) {
            done += s_.write(std::span(buf_.data() + done, n - done), ec);
            if (ec && ec != std::errc::interrupted) fail("stream write: %s", ec.message().c_str());
        }
    }
    void get(uint64_t size) override {
        size_t n = std::max<uint64_t>(size, 1), done = 0;
        std::error_code ec;
        while (done < n) {
            size_t r = s_.read(std::span(buf_.data() + done, n - done), vipl::kNever, ec);
            if (r == 0 && !ec) fail("stream read: the peer closed");
            if (ec && ec != std::errc::interrupted) fail("stream read: %s", ec.message().c_str());
            done += r;
        }
    }

    vipl::Stream s_;
    std::vector<std::byte> buf_;
};

// Asio's composed operations over an AsioStream, one io_context run per exchange.
class AsioPeer : public MessagePeer {
public:
    AsioPeer(vipl::Stream s, uint64_t max)
        : s_(ioc_, std::move(s)), buf_(std::max<uint64_t>(max, 1)) {}
    void ping(uint64_t size) override { exchange(size, true); }
    void pong(uint64_t size) override { exchange(size, false); }
    void close() override {
        vipl::Stream s = s_.release();
        if (s) s.close(vipl::deadline_in(std::chrono::seconds(5)));
    }

private:
    static void check(const boost::system::error_code &ec, const char *what) {
        if (ec) fail("%s: %s", what, ec.message().c_str());
    }
    void run() {
        ioc_.restart();
        ioc_.run();
    }
    // One io_context run that writes then reads (the client's round trip) or reads then
    // writes (the server's echo), the second operation started from the first's handler.
    void exchange(uint64_t size, bool write_first) {
        auto buf = boost::asio::buffer(buf_.data(), std::max<uint64_t>(size, 1));
        auto second = [this, buf, write_first](auto ec, size_t) {
            check(ec, write_first ? "async_write" : "async_read");
            auto done = [write_first](auto ec2, size_t) {
                check(ec2, write_first ? "async_read" : "async_write");
            };
            if (write_first)
                boost::asio::async_read(s_, buf, done);
            else
                boost::asio::async_write(s_, buf, done);
        };
        if (write_first)
            boost::asio::async_write(s_, buf, second);
        else
            boost::asio::async_read(s_, buf, second);
        run();
    }
    void put(uint64_t size) override {
        boost::asio::async_write(s_, boost::asio::buffer(buf_.data(), std::max<uint64_t>(size, 1)),
                                 [&](auto ec, size_t) { check(ec, "async_write"); });
        run();
    }
    void get(uint64_t size) override {
        boost::asio::async_read(s_, boost::asio::buffer(buf_.data(), std::max<uint64_t>(size, 1)),
                                [&](auto ec, size_t) { check(ec, "async_read"); });
        run();
    }

    boost::asio::io_context ioc_;
    vipl::AsioStream s_;
    std::vector<std::byte> buf_;
};

class StreamTransport : public Transport {
public:
    std::unique_ptr<Peer> open(const Options &o, bool server, int ctl) override {
        if (o.variant != "stream" && o.variant != "asio") fail("--variant must be stream or asio");
        std::error_code ec;
        std::string why;
        vipl::StreamOptions opt = vipl::stream_options_from_env(ec, &why);
        if (ec) fail("VIPL_STREAM_*: %s", why.c_str());
        vipl::Stream s;
        if (server) {
            // Port 0: the listener picks a free one and tells the client.
            vipl::Listener l = vipl::Listener::bind(where(0), ec, opt);
            if (ec) fail("listen: %s", ec.message().c_str());
            uint16_t port = l.uri().port;
            ctl_write(ctl, &port, sizeof port);
            s = l.accept(vipl::deadline_in(kSetup), ec);
            if (ec) fail("accept: %s", ec.message().c_str());
        } else {
            uint16_t port = 0;
            ctl_read(ctl, &port, sizeof port);
            s = vipl::Stream::connect(where(port), vipl::deadline_in(kSetup), ec, opt);
            if (ec) fail("connect: %s", ec.message().c_str());
        }
        if (o.variant == "asio") return std::make_unique<AsioPeer>(std::move(s), o.max_size());
        return std::make_unique<StreamPeer>(std::move(s), o.max_size());
    }
};

} // namespace
} // namespace bench

int main(int argc, char **argv) {
    bench::Options o = bench::parse_options(argc, argv);
    bench::StreamTransport t;
    return bench::run(o, t);
}
