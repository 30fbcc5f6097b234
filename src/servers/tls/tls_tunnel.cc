#include "servers/tls/tls_tunnel.h"

#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <array>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>

namespace tally::tls {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
// How long the tunnel tries to send close_notify to a client that does not read.
constexpr auto kCloseTimeout = std::chrono::seconds(2);
constexpr size_t kRelayChunk = size_t{16} * 1024;  // one TLS record's worth

}  // namespace

// One client's tunnel: the TLS stream, our end of the socket pair, a buffer per direction.
// Lives on its executor's thread, kept alive by its pending operations.
class Tunnel : public std::enable_shared_from_this<Tunnel> {
 public:
  Tunnel(tcp::socket socket, std::shared_ptr<asio::ssl::context> context)
      : context_(std::move(context)),
        tls_(std::move(socket), *context_),
        inner_(tls_.get_executor()),
        deadline_(tls_.get_executor()) {}

  asio::any_io_executor get_executor() { return tls_.get_executor(); }

  void Start(ClientAuth auth, AdoptTunnel adopt) {
    peer_ = servers::Peer::Of(tls_.next_layer());
    // On the client's TCP socket, as a plain connection sets it on its own: a reply must not
    // wait for the client's delayed ACK. (The inner socket pair has no Nagle to turn off.)
    boost::system::error_code ignored;
    tls_.next_layer().set_option(tcp::no_delay(true), ignored);
    switch (auth) {
      case ClientAuth::kYes:
        tls_.set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
        break;
      case ClientAuth::kOptional:
        tls_.set_verify_mode(asio::ssl::verify_peer);
        break;
      case ClientAuth::kNo:
        tls_.set_verify_mode(asio::ssl::verify_none);
        break;
    }
    Arm(kHandshakeTimeout);
    tls_.async_handshake(
        asio::ssl::stream_base::server,
        [self = shared_from_this(), adopt = std::move(adopt)](
            const boost::system::error_code& error) { self->OnHandshake(error, adopt); });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    deadline_.cancel();
    tls_.next_layer().close(ignored);
    inner_.close(ignored);
  }

 private:
  void Arm(std::chrono::steady_clock::duration timeout) {
    deadline_.expires_after(timeout);
    deadline_.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
      if (!error) self->Close();
    });
  }

  void OnHandshake(const boost::system::error_code& error, const AdoptTunnel& adopt) {
    deadline_.cancel();
    if (closed_) return;
    if (error) {
      spdlog::debug("TLS handshake with {} failed: {}", servers::FormatEndpoint(peer_.remote),
                    error.message());
      Close();
      return;
    }
    asio::local::stream_protocol::socket theirs(tls_.get_executor());
    boost::system::error_code failed;
    asio::local::connect_pair(inner_, theirs, failed);
    tcp::socket server_end(tls_.get_executor());
    if (!failed) server_end.assign(tcp::v4(), theirs.release(), failed);
    if (failed) {
      spdlog::warn("TLS client {}: cannot make its socket pair: {}",
                   servers::FormatEndpoint(peer_.remote), failed.message());
      Close();
      return;
    }
    inner_.non_blocking(true, failed);
    adopt(std::move(server_end), peer_);
    RelayIn();
    RelayOut();
  }

  // Client to server: TLS records in, cleartext to the server's socket.
  void RelayIn() {
    tls_.async_read_some(asio::buffer(in_), [self = shared_from_this()](
                                                const boost::system::error_code& error, size_t n) {
      if (self->closed_) return;
      if (error) {
        self->in_done_ = true;
        if (self->out_done_) {
          self->SendCloseNotify();
        } else {
          // The client is done (or its TLS failed): the server reads the end of input.
          boost::system::error_code ignored;
          self->inner_.shutdown(asio::socket_base::shutdown_send, ignored);
        }
        return;
      }
      asio::async_write(self->inner_, asio::buffer(self->in_.data(), n),
                        [self](const boost::system::error_code& failed, size_t) {
                          if (failed) {
                            self->Close();
                            return;
                          }
                          self->RelayIn();
                        });
    });
  }

  // Server to client: cleartext from the server's socket, TLS records out.
  void RelayOut() {
    inner_.async_read_some(
        asio::buffer(out_),
        [self = shared_from_this()](const boost::system::error_code& error, size_t n) {
          if (self->closed_) return;
          if (error) {
            // The server closed the connection. Stop reading the client (its read's handler
            // then says goodbye in TLS), unless that side is over already.
            self->out_done_ = true;
            if (self->in_done_) {
              self->Close();
            } else {
              boost::system::error_code ignored;
              self->tls_.next_layer().cancel(ignored);
            }
            return;
          }
          asio::async_write(self->tls_, asio::buffer(self->out_.data(), n),
                            [self](const boost::system::error_code& failed, size_t) {
                              if (failed) {
                                self->Close();
                                return;
                              }
                              self->RelayOut();
                            });
        });
  }

  // Sends close_notify without waiting for the client's (as if received), then closes.
  void SendCloseNotify() {
    SSL_set_shutdown(tls_.native_handle(), SSL_RECEIVED_SHUTDOWN);
    Arm(kCloseTimeout);
    tls_.async_shutdown(
        [self = shared_from_this()](const boost::system::error_code&) { self->Close(); });
  }

  std::shared_ptr<asio::ssl::context> context_;  // outlives tls_, which refers to it
  asio::ssl::stream<tcp::socket> tls_;
  asio::local::stream_protocol::socket inner_;  // our end of the pair
  asio::steady_timer deadline_;                 // the handshake's, then close_notify's
  servers::Peer peer_;
  std::array<char, kRelayChunk> in_{};
  std::array<char, kRelayChunk> out_{};
  bool in_done_ = false;   // the client's side ended
  bool out_done_ = false;  // the server's side ended
  bool closed_ = false;
};

void TunnelSet::Serve(tcp::socket socket, std::shared_ptr<asio::ssl::context> context,
                      ClientAuth auth, AdoptTunnel adopt) {
  auto tunnel = std::make_shared<Tunnel>(std::move(socket), std::move(context));
  {
    std::lock_guard lock(mutex_);
    if (tunnels_.size() >= prune_at_) {
      std::erase_if(tunnels_, [](const std::weak_ptr<Tunnel>& t) { return t.expired(); });
      prune_at_ = std::max<size_t>(64, tunnels_.size() * 2);
    }
    tunnels_.push_back(tunnel);
  }
  asio::post(tunnel->get_executor(), [tunnel, auth, adopt = std::move(adopt)]() mutable {
    tunnel->Start(auth, std::move(adopt));
  });
}

void TunnelSet::CloseAll() {
  std::vector<std::weak_ptr<Tunnel>> tunnels;
  {
    std::lock_guard lock(mutex_);
    tunnels.swap(tunnels_);
  }
  for (const auto& weak : tunnels) {
    if (auto tunnel = weak.lock()) tunnel->Close();
  }
}

}  // namespace tally::tls
