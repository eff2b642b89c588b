// A vipl::Stream as a Boost.Asio stream (Boost 1.74 or later, header-only).
//
// AsioStream meets Asio's AsyncReadStream, AsyncWriteStream, SyncReadStream and
// SyncWriteStream requirements: boost::asio::async_read/async_write/read/write and
// everything built on them work on it.  It owns the Stream, puts it in non-blocking
// mode, and waits on Stream::wait_fd() with a posix::stream_descriptor that never owns
// the fd (it is released, not closed, before the Stream goes).
//
// Asynchronous operations try the Stream at once and, when it would block, spin as the
// Stream's policy allows (options().spin_us; adaptive, so a quiet stream soon costs no
// spin), then arm the wait fd (Stream::arm(): for arrivals while only reads wait, for any
// event while a write waits for room) and wait for it to be readable, then try again; one
// that finds the Stream ready when it arms tries again through the executor.  The wait fd
// stays quiet until armed, so the peer rings it only while an operation here waits
// (Stream::fd(), armed after every call, would cost a system call per message at each
// end).  Handlers are never called from inside the initiating function.  At most one read
// and one write may be outstanding at a time (as for sockets).  Data moves inside these
// operations, and what a completed write left held back by flow control leaves as credits
// come while the io_context runs (a wait of the AsioStream's own on the fd), as a socket's
// kernel would send it.  Otherwise a Stream with no operation outstanding takes nothing
// in.
//
// Errors: boost::system::error_code; conditions from the Stream keep their std::errc
// value in boost's generic category (so `ec == boost::asio::error::connection_reset`
// holds), the end of stream is boost::asio::error::eof, libvipl codes come in a "vipl"
// category.  The synchronous overloads without an error_code throw
// boost::system::system_error, as Asio's sync stream requirements ask; nothing else
// throws.  Sync operations block (the Stream's blocking calls, so a large write_some
// sends zero-copy) and retry after a signal.
//
// Threads: like an Asio socket, one AsioStream is used by one thread (or strand) at a
// time.  Closing: the destructor closes the Stream in order, blocking up to its linger
// (see Stream::close()); release() hands the Stream back instead.
#pragma once

#include "vipl/error.h"
#include "vipl/spin.h"
#include "vipl/stream.h"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
#include <poll.h>

#include <cstddef>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace vipl {

namespace asio_detail {

class BoostCategory final : public boost::system::error_category {
public:
    const char *name() const noexcept override { return "vipl"; }
    std::string message(int v) const override { return vipl_category().message(v); }
};

inline const boost::system::error_category &boost_vipl_category() noexcept {
    static const BoostCategory c;
    return c;
}

// A Stream error as Asio expects it (errno values stay errno values).
inline boost::system::error_code to_boost(const std::error_code &ec) noexcept {
    if (!ec) return {};
    if (ec.category() == std::generic_category())
        return {ec.value(), boost::system::generic_category()};
    if (ec.category() == std::system_category())
        return {ec.value(), boost::system::system_category()};
    return {ec.value(), boost_vipl_category()};
}

} // namespace asio_detail

class AsioStream {
public:
    using executor_type = boost::asio::any_io_executor;

    // Takes `stream` (non-blocking from now on).  An empty Stream gives an AsioStream
    // whose operations fail with not_connected.
    AsioStream(const executor_type &ex, Stream stream) : stream_(std::move(stream)), sd_(ex) {
        stream_.set_nonblocking(true);
        stream_.set_fd_events(0); // fd() unused: a program that polled it polls no more
        boost::system::error_code ec;
        if (stream_.wait_fd() >= 0) sd_.assign(stream_.wait_fd(), ec);
    }
    template <class Context,
              std::enable_if_t<std::is_convertible_v<Context &, boost::asio::execution_context &>,
                               int> = 0>
    AsioStream(Context &ctx, Stream stream) : AsioStream(ctx.get_executor(), std::move(stream)) {}

    // Not while operations are outstanding.
    AsioStream(AsioStream &&o) noexcept
        : stream_(std::move(o.stream_)),
          sd_((o.stop_flushing(), std::move(o.sd_))), waiting_{0, 0} {
        keep_flushing();
    }
    AsioStream &operator=(AsioStream &&) = delete;
    AsioStream(const AsioStream &) = delete;
    AsioStream &operator=(const AsioStream &) = delete;

    // Cancels what is outstanding (operation_aborted), then closes the Stream in order.
    ~AsioStream() { release_fd(); }

    executor_type get_executor() noexcept { return sd_.get_executor(); }

    // The Stream underneath, for counters, options, shutdown_write() and events().  Keep
    // it non-blocking, leave set_fd_events() to this class, never read or write it
    // directly while an operation is outstanding.
    Stream &stream() noexcept { return stream_; }

    // Outstanding operations complete with boost::asio::error::operation_aborted.
    void cancel() {
        boost::system::error_code ec;
        sd_.cancel(ec);
        waiting_[0] = waiting_[1] = 0;
        flushing_ = false;
        stream_.set_fd_events(0);
    }

    // Cancels what is outstanding and gives the Stream back (blocking mode again); the
    // AsioStream is empty afterwards.
    Stream release() noexcept {
        release_fd();
        stream_.set_nonblocking(false);
        stream_.set_fd_events(POLLIN);
        return std::move(stream_);
    }

    // --- SyncReadStream / SyncWriteStream
    template <class MutableBufferSequence>
    std::size_t read_some(const MutableBufferSequence &buffers, boost::system::error_code &ec) {
        return sync_op<true>(buffers, ec);
    }
    template <class MutableBufferSequence>
    std::size_t read_some(const MutableBufferSequence &buffers) {
        boost::system::error_code ec;
        std::size_t n = read_some(buffers, ec);
        if (ec) throw boost::system::system_error(ec, "vipl::AsioStream::read_some");
        return n;
    }
    template <class ConstBufferSequence>
    std::size_t write_some(const ConstBufferSequence &buffers, boost::system::error_code &ec) {
        return sync_op<false>(buffers, ec);
    }
    template <class ConstBufferSequence>
    std::size_t write_some(const ConstBufferSequence &buffers) {
        boost::system::error_code ec;
        std::size_t n = write_some(buffers, ec);
        if (ec) throw boost::system::system_error(ec, "vipl::AsioStream::write_some");
        return n;
    }

    // --- AsyncReadStream / AsyncWriteStream; handler: void(error_code, std::size_t)
    template <class MutableBufferSequence, class ReadToken>
    auto async_read_some(const MutableBufferSequence &buffers, ReadToken &&token) {
        return boost::asio::async_compose<ReadToken, void(boost::system::error_code, std::size_t)>(
            Op<MutableBufferSequence, true>{this, buffers}, token, sd_);
    }
    template <class ConstBufferSequence, class WriteToken>
    auto async_write_some(const ConstBufferSequence &buffers, WriteToken &&token) {
        return boost::asio::async_compose<WriteToken, void(boost::system::error_code, std::size_t)>(
            Op<ConstBufferSequence, false>{this, buffers}, token, sd_);
    }

private:
    template <class Buffers, bool Read>
    struct Op {
        AsioStream *s;
        Buffers buffers;
        enum { starting, waiting, finishing } state = starting;
        boost::system::error_code ec{};
        std::size_t n = 0;

        template <class Self>
        void operator()(Self &self, boost::system::error_code wait_ec = {}) {
            if (state == finishing) return self.complete(ec, n);
            if (state == waiting) {
                // Cancelled: the AsioStream may be gone, touch nothing of it.
                if (wait_ec) return self.complete(wait_ec, 0);
                s->stop_waiting(Read);
            }
            bool would_block;
            n = s->try_op<Read>(buffers, ec, would_block);
            if (would_block && s->spin(Read)) n = s->try_op<Read>(buffers, ec, would_block);
            if (would_block) {
                state = waiting;
                s->start_waiting(Read);
                if (s->arm(Read))
                    s->sd_.async_wait(boost::asio::posix::descriptor_base::wait_read,
                                      std::move(self));
                else
                    boost::asio::post(std::move(self)); // ready since the look: again
                return;
            }
            if (state == starting) {
                // Not from inside the initiating function: through the executor.
                state = finishing;
                return boost::asio::post(std::move(self));
            }
            self.complete(ec, n);
        }
    };

    // One attempt without blocking over the buffers in turn, stopping at the first short
    // transfer; eof for an orderly end with nothing read; would_block apart.
    template <bool Read, class Buffers>
    std::size_t try_op(const Buffers &buffers, boost::system::error_code &ec, bool &would_block) {
        ec = {};
        would_block = false;
        std::size_t total = 0;
        for (auto it = boost::asio::buffer_sequence_begin(buffers);
             it != boost::asio::buffer_sequence_end(buffers); ++it) {
            auto b = boost::asio::buffer(*it);
            if (b.size() == 0) continue;
            std::error_code e;
            std::size_t k = transfer<Read>(b.data(), b.size(), e);
            total += k;
            if (total == 0) {
                would_block = e == std::errc::operation_would_block;
                if (e && !would_block) ec = asio_detail::to_boost(e);
                if (!e && Read) ec = boost::asio::error::eof;
                return 0;
            }
            if (e || k < b.size()) break;
        }
        return total;
    }

    template <bool Read>
    std::size_t transfer(const void *p, std::size_t len, std::error_code &ec) {
        auto *b = static_cast<std::byte *>(const_cast<void *>(p));
        if constexpr (Read) {
            return stream_.read(std::span<std::byte>(b, len), ec);
        } else {
            std::size_t n = stream_.write(std::span<const std::byte>(b, len), ec);
            keep_flushing();
            return n;
        }
    }

    template <bool Read, class Buffers>
    std::size_t sync_op(const Buffers &buffers, boost::system::error_code &bec) {
        // The first non-empty buffer, in blocking mode (a partial transfer is allowed).
        std::error_code ec;
        std::size_t n = 0;
        for (;;) {
            stream_.set_nonblocking(false);
            auto it = boost::asio::buffer_sequence_begin(buffers);
            auto end = boost::asio::buffer_sequence_end(buffers);
            while (it != end && boost::asio::buffer(*it).size() == 0) ++it;
            if (it == end) {
                stream_.set_nonblocking(true);
                bec = {};
                return 0;
            }
            auto b = boost::asio::buffer(*it);
            n = transfer<Read>(b.data(), b.size(), ec);
            stream_.set_nonblocking(true);
            if (ec == std::errc::interrupted) continue;
            if (Read && !ec && n == 0) {
                bec = boost::asio::error::eof;
                return 0;
            }
            break;
        }
        bec = asio_detail::to_boost(ec);
        return n;
    }

    // Before an operation's first wait: spins as the Stream's policy allows (its
    // options().spin_us, adaptive; hand-offs to a peer on this CPU), looking at its
    // readiness.  True when it became ready for the operation (or broke).  The
    // io_context's thread runs nothing else meanwhile, which is why the policy's budget
    // shrinks while spins find nothing: a quiet stream soon costs no spin at all, and
    // an answering one saves the wait fd's system calls and the wake-up at both ends.
    bool spin(bool read) {
        Spin spin;
        spin.add(stream_.spin_budget());
        if (!spin.active()) return false;
        short want = (read ? POLLIN : POLLOUT) | POLLERR | POLLHUP;
        bool got = spin.run([&] { return (stream_.events() & want) != 0; }, kNever);
        spin.report(stream_, got, got);
        return got;
    }
    void start_waiting(bool read) { waiting_[read]++; }
    void stop_waiting(bool read) {
        if (waiting_[read] > 0) waiting_[read]--;
    }
    // After an operation's look found nothing: arms the wait fd, or false when the
    // Stream is ready for it (or broken) already.  One arming serves every waiter of the
    // fd, so it covers any event while a write or a flush waits.
    bool arm(bool read) {
        return stream_.arm_to_sleep(read ? POLLIN : POLLOUT, true,
                                    !read || waiting_[0] > 0 || flushing_);
    }
    void release_fd() noexcept {
        if (sd_.is_open()) {
            boost::system::error_code ec;
            sd_.cancel(ec);
            sd_.release();
        }
        waiting_[0] = waiting_[1] = 0;
        flushing_ = false;
    }

    // What flow control holds back after a write leaves as credits come: they make the
    // fd readable (an edge, which the wait registered here before the io_context looks
    // again cannot miss).
    void stop_flushing() noexcept {
        if (!flushing_) return;
        boost::system::error_code ec;
        sd_.cancel(ec); // only the flush waits: no operation is outstanding
        flushing_ = false;
    }
    void keep_flushing() {
        if (flushing_ || !sd_.is_open() || !stream_.holds_back()) return;
        // Broken: nothing more will leave, and an error leaves the fd unarmed.
        if (!stream_.arm_to_sleep(0, true, true)) return;
        flushing_ = true;
        sd_.async_wait(boost::asio::posix::descriptor_base::wait_read,
                       [this](const boost::system::error_code &ec) {
                           if (ec) return; // cancelled: the AsioStream may be gone
                           flushing_ = false;
                           std::error_code e;
                           stream_.progress(e);
                           if (!e) keep_flushing();
                       });
    }

    Stream stream_;
    boost::asio::posix::stream_descriptor sd_;
    unsigned waiting_[2] = {0, 0}; // [0] writes, [1] reads waiting on the fd (arm())
    bool flushing_ = false;        // keep_flushing() waits on the fd
};

} // namespace vipl
