// The TLS settings of a node, with Redis's option names. Both servers' TLS ports use the one
// certificate; client certificates are asked for on the Redis TLS port only (HTTP clients
// say who they are with the Authorization header). Each field names its tallyd option.
#pragma once

#include <string>

namespace tally::tls {

// --tls-auth-clients: whether a client on the Redis TLS port must show a certificate signed
// by the CA of --tls-ca-cert-file.
enum class ClientAuth {
  kNo,        // not asked for
  kOptional,  // asked for; a client without one is let in, one with a bad one is not
  kYes,       // required (Redis's default)
};

struct TlsOptions {
  std::string cert_file;     // --tls-cert-file: the server's certificate chain (PEM)
  std::string key_file;      // --tls-key-file: its private key (PEM, unencrypted)
  std::string ca_cert_file;  // --tls-ca-cert-file: CAs that sign client certificates
  ClientAuth auth_clients = ClientAuth::kYes;  // --tls-auth-clients yes|no|optional
  // --tls-protocols: the TLS versions offered, "TLSv1.2 TLSv1.3" (the default, both); older
  // versions are refused.
  std::string protocols = "TLSv1.2 TLSv1.3";
  std::string ciphers;       // --tls-ciphers: TLS 1.2 cipher list (OpenSSL's default if empty)
  std::string ciphersuites;  // --tls-ciphersuites: TLS 1.3 suites (OpenSSL's default if empty)

  // True when TLS is configured (a certificate is given).
  bool enabled() const { return !cert_file.empty(); }
};

}  // namespace tally::tls
