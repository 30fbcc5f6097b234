// TlsContext: a node's TLS server configuration (an OpenSSL context built from TlsOptions'
// files), shared by both servers' TLS ports and reloadable without a restart.
//
// Each new TLS connection takes the current context (Current()); Reload() reads the files
// again and, when they load, makes a new context current. Connections already open keep the
// context they started with, so a reload never disturbs them, and a reload that fails (a
// half-written key, say) changes nothing. Thread-safe.
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <mutex>

#include "core/status.h"
#include "servers/tls/tls_options.h"

namespace tally::tls {

class TlsContext {
 public:
  // Loads the certificate, key and CA files. Errors name the option and the file
  // ("--tls-key-file /etc/tally/key.pem: ..."), or the bad --tls-protocols word.
  // REQUIRES: options.enabled().
  static Result<std::unique_ptr<TlsContext>> Create(TlsOptions options);

  // The context for a connection accepted now.
  std::shared_ptr<boost::asio::ssl::context> Current() const;

  // Reads the files again (the certificate was renewed): on success new connections use
  // them; on an error nothing changes and the error says why.
  Status Reload();

  const TlsOptions& options() const { return options_; }

 private:
  TlsContext(TlsOptions options, std::shared_ptr<boost::asio::ssl::context> context)
      : options_(std::move(options)), current_(std::move(context)) {}

  const TlsOptions options_;
  mutable std::mutex mutex_;
  std::shared_ptr<boost::asio::ssl::context> current_;  // guarded by mutex_
};

// The TLS versions named by --tls-protocols ("TLSv1.2 TLSv1.3", any case, either order), as
// OpenSSL's lowest and highest version numbers; an error for an empty list or any other word
// (TLSv1 and TLSv1.1 are not offered).
struct ProtocolRange {
  int min_version;
  int max_version;
};
Result<ProtocolRange> ParseProtocols(std::string_view protocols);

// --tls-auth-clients's words: yes, no, optional.
Result<ClientAuth> ParseClientAuth(std::string_view word);

}  // namespace tally::tls
