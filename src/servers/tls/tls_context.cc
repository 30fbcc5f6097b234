#include "servers/tls/tls_context.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cctype>
#include <string>

namespace tally::tls {
namespace {

namespace ssl = boost::asio::ssl;

// The reason OpenSSL (or the OS) gave for `error`.
std::string Reason(const boost::system::error_code& error) {
  std::string reason = error.message();
  if (reason.empty()) reason = "unknown error";
  return reason;
}

// Builds a server context from the options' files.
Result<std::shared_ptr<ssl::context>> Build(const TlsOptions& options) {
  auto range = ParseProtocols(options.protocols);
  if (!range) return tl::make_unexpected(range.error());
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = context->native_handle();
  SSL_CTX_set_min_proto_version(native, range->min_version);
  SSL_CTX_set_max_proto_version(native, range->max_version);
  // The versions are the range above (TLS 1.2 at the least); the no_sslv*/no_tlsv1* options
  // would add nothing to it.
  context->set_options(ssl::context::default_workarounds);
  // No session tickets or renegotiation: nothing to rotate, no client-started renegotiation.
  SSL_CTX_set_options(native, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);

  boost::system::error_code error;
  context->use_certificate_chain_file(options.cert_file, error);
  if (error) {
    return InvalidArgument(
        fmt::format("--tls-cert-file {}: cannot load: {}", options.cert_file, Reason(error)));
  }
  context->use_private_key_file(options.key_file, ssl::context::pem, error);
  if (error) {
    return InvalidArgument(
        fmt::format("--tls-key-file {}: cannot load: {}", options.key_file, Reason(error)));
  }
  if (!options.ca_cert_file.empty()) {
    context->load_verify_file(options.ca_cert_file, error);
    STACK_OF(X509_NAME)* names =
        error ? nullptr : SSL_load_client_CA_file(options.ca_cert_file.c_str());
    if (names == nullptr) {
      ERR_clear_error();
      return InvalidArgument(fmt::format("--tls-ca-cert-file {}: cannot load: {}",
                                         options.ca_cert_file,
                                         error ? Reason(error) : "no certificate in it"));
    }
    SSL_CTX_set_client_CA_list(native, names);
  } else if (options.auth_clients != ClientAuth::kNo) {
    return InvalidArgument(
        "--tls-ca-cert-file is needed to check client certificates (--tls-auth-clients is yes "
        "or optional; 'no' does without)");
  }
  if (!options.ciphers.empty() && SSL_CTX_set_cipher_list(native, options.ciphers.c_str()) != 1) {
    ERR_clear_error();
    return InvalidArgument(
        fmt::format("--tls-ciphers '{}': no cipher OpenSSL knows", options.ciphers));
  }
  if (!options.ciphersuites.empty() &&
      SSL_CTX_set_ciphersuites(native, options.ciphersuites.c_str()) != 1) {
    ERR_clear_error();
    return InvalidArgument(
        fmt::format("--tls-ciphersuites '{}': no suite OpenSSL knows", options.ciphersuites));
  }
  return context;
}

}  // namespace

Result<ProtocolRange> ParseProtocols(std::string_view protocols) {
  int min_version = 0;
  int max_version = 0;
  size_t start = 0;
  while (start < protocols.size()) {
    const size_t end = std::min(protocols.find(' ', start), protocols.size());
    const std::string_view word = protocols.substr(start, end - start);
    start = end + 1;
    if (word.empty()) continue;
    std::string lower(word);
    std::ranges::transform(lower, lower.begin(), [](unsigned char c) { return std::tolower(c); });
    int version = 0;
    if (lower == "tlsv1.2") {
      version = TLS1_2_VERSION;
    } else if (lower == "tlsv1.3") {
      version = TLS1_3_VERSION;
    } else {
      return InvalidArgument(
          fmt::format("--tls-protocols: '{}' is not offered (TLSv1.2 and TLSv1.3 only)", word));
    }
    min_version = min_version == 0 ? version : std::min(min_version, version);
    max_version = std::max(max_version, version);
  }
  if (min_version == 0) return InvalidArgument("--tls-protocols: no protocol named");
  return ProtocolRange{min_version, max_version};
}

Result<ClientAuth> ParseClientAuth(std::string_view word) {
  if (word == "yes") return ClientAuth::kYes;
  if (word == "no") return ClientAuth::kNo;
  if (word == "optional") return ClientAuth::kOptional;
  return InvalidArgument(fmt::format("--tls-auth-clients: '{}' is not yes, no or optional", word));
}

Result<std::unique_ptr<TlsContext>> TlsContext::Create(TlsOptions options) {
  auto context = Build(options);
  if (!context) return tl::make_unexpected(context.error());
  return std::unique_ptr<TlsContext>(new TlsContext(std::move(options), std::move(*context)));
}

std::shared_ptr<boost::asio::ssl::context> TlsContext::Current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

Status TlsContext::Reload() {
  auto context = Build(options_);
  if (!context) return tl::make_unexpected(context.error());
  std::lock_guard lock(mutex_);
  current_ = std::move(*context);
  return OkStatus();
}

}  // namespace tally::tls
