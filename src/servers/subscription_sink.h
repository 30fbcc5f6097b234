// PostingSink: the SubscriberSink of a server connection (Redis or HTTP). The hub calls it
// on its flusher thread; it posts the work to the connection's own event loop and returns.
// It holds the connection weakly: a connection that closed meanwhile simply gets nothing.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>
#include <memory>
#include <string>

#include "engine/subscriptions.h"

namespace tally::servers {

// `Target` has, called on its event loop's thread:
//   void PushUpdates(const engine::SubscriptionDelivery&);  // write them to the client
//   void DropSubscriber(std::string reason);                 // tell the client, close
template <typename Target>
class PostingSink final : public engine::SubscriberSink {
 public:
  PostingSink(boost::asio::any_io_executor executor, std::weak_ptr<Target> target)
      : executor_(std::move(executor)), target_(std::move(target)) {}

  void Deliver(engine::SubscriptionDelivery delivery) override {
    // Shared, so that the handler is copyable; the delivery ends (and the hub may hand over
    // the next one) once the handler ran, or was dropped with a stopped loop.
    auto shared = std::make_shared<engine::SubscriptionDelivery>(std::move(delivery));
    boost::asio::post(executor_, [target = target_, shared] {
      if (auto locked = target.lock()) locked->PushUpdates(*shared);
    });
  }

  void Disconnect(std::string reason) override {
    boost::asio::post(executor_, [target = target_, reason = std::move(reason)]() mutable {
      if (auto locked = target.lock()) locked->DropSubscriber(std::move(reason));
    });
  }

 private:
  boost::asio::any_io_executor executor_;
  std::weak_ptr<Target> target_;
};

}  // namespace tally::servers
