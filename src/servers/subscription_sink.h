// PostingSink: the SubscriberSink of a server connection (Redis or HTTP). The hub calls it
// on its flusher thread; it posts the work to the connection's own event loop and returns.
// It holds the connection weakly: a connection that closed meanwhile simply gets nothing.
// `Post` queues a copyable callable on the loop (an Asio executor for HTTP, the Redis
// worker's EpollLoop).
#pragma once

#include <functional>
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
  using Post = std::function<void(std::function<void()>)>;

  PostingSink(Post post, std::weak_ptr<Target> target)
      : post_(std::move(post)), target_(std::move(target)) {}

  void Deliver(engine::SubscriptionDelivery delivery) override {
    // Shared, so that the handler is copyable; the delivery ends (and the hub may hand over
    // the next one) once the handler ran, or was dropped with a stopped loop.
    auto shared = std::make_shared<engine::SubscriptionDelivery>(std::move(delivery));
    post_([target = target_, shared] {
      if (auto locked = target.lock()) locked->PushUpdates(*shared);
    });
  }

  void Disconnect(std::string reason) override {
    post_([target = target_, reason = std::move(reason)]() mutable {
      if (auto locked = target.lock()) locked->DropSubscriber(std::move(reason));
    });
  }

 private:
  Post post_;
  std::weak_ptr<Target> target_;
};

}  // namespace tally::servers
