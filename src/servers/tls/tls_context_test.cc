// TlsContext: the files it loads, the errors that name them, reloads that keep the old
// context on failure. The certificates are made at test time with the openssl command.
#include "servers/tls/tls_context.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace tally::tls {
namespace {

namespace fs = std::filesystem;

class TlsContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("tally-tls-{}-{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    ASSERT_TRUE(MakeCertificate("a"));
    ASSERT_TRUE(MakeCertificate("b"));
    options_.cert_file = Path("a.crt");
    options_.key_file = Path("a.key");
    options_.auth_clients = ClientAuth::kNo;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A self-signed certificate and key, <name>.crt and <name>.key, with common name <name>.
  bool MakeCertificate(const std::string& name) const {
    const std::string command = fmt::format(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
        "-subj /CN={0} -keyout {1}/{0}.key -out {1}/{0}.crt >/dev/null 2>&1",
        name, dir_.string());
    return std::system(command.c_str()) == 0;
  }

  // The common name of the certificate a context serves.
  static std::string ServedName(boost::asio::ssl::context& context) {
    X509* certificate = SSL_CTX_get0_certificate(context.native_handle());
    if (certificate == nullptr) return "";
    char name[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(certificate), NID_commonName, name,
                              sizeof name);
    return name;
  }

  fs::path dir_;
  TlsOptions options_;
};

TEST(TlsProtocolsTest, OnlyTls12AndLater) {
  auto both = ParseProtocols("TLSv1.2 TLSv1.3");
  ASSERT_TRUE(both);
  EXPECT_EQ(both->min_version, TLS1_2_VERSION);
  EXPECT_EQ(both->max_version, TLS1_3_VERSION);
  auto only13 = ParseProtocols(" tlsv1.3 ");
  ASSERT_TRUE(only13);
  EXPECT_EQ(only13->min_version, TLS1_3_VERSION);
  EXPECT_EQ(only13->max_version, TLS1_3_VERSION);
  EXPECT_EQ(ParseProtocols("TLSv1.1 TLSv1.2").error().message,
            "--tls-protocols: 'TLSv1.1' is not offered (TLSv1.2 and TLSv1.3 only)");
  EXPECT_EQ(ParseProtocols("  ").error().message, "--tls-protocols: no protocol named");
}

TEST(TlsClientAuthTest, RedisWords) {
  EXPECT_EQ(ParseClientAuth("yes").value(), ClientAuth::kYes);
  EXPECT_EQ(ParseClientAuth("no").value(), ClientAuth::kNo);
  EXPECT_EQ(ParseClientAuth("optional").value(), ClientAuth::kOptional);
  EXPECT_EQ(ParseClientAuth("maybe").error().message,
            "--tls-auth-clients: 'maybe' is not yes, no or optional");
}

TEST_F(TlsContextTest, LoadsTheCertificateAndKey) {
  auto context = TlsContext::Create(options_);
  ASSERT_TRUE(context) << context.error().message;
  EXPECT_EQ(ServedName(*(*context)->Current()), "a");
  EXPECT_EQ(SSL_CTX_get_min_proto_version((*context)->Current()->native_handle()), TLS1_2_VERSION);
}

TEST_F(TlsContextTest, ErrorsNameTheOptionAndFile) {
  TlsOptions missing = options_;
  missing.cert_file = Path("none.crt");
  auto error = TlsContext::Create(missing);
  ASSERT_FALSE(error);
  EXPECT_TRUE(
      error.error().message.starts_with("--tls-cert-file " + Path("none.crt") + ": cannot load: "))
      << error.error().message;

  TlsOptions mismatched = options_;
  mismatched.key_file = Path("b.key");
  error = TlsContext::Create(mismatched);
  ASSERT_FALSE(error);
  // OpenSSL checks that the key is the certificate's.
  EXPECT_EQ(error.error().message,
            fmt::format("--tls-key-file {}: cannot load: key values mismatch", Path("b.key")));

  TlsOptions no_ca = options_;
  no_ca.auth_clients = ClientAuth::kYes;
  error = TlsContext::Create(no_ca);
  ASSERT_FALSE(error);
  EXPECT_EQ(error.error().message,
            "--tls-ca-cert-file is needed to check client certificates (--tls-auth-clients is "
            "yes or optional; 'no' does without)");

  TlsOptions with_ca = no_ca;
  with_ca.ca_cert_file = Path("b.crt");
  EXPECT_TRUE(TlsContext::Create(with_ca));
}

TEST_F(TlsContextTest, ReloadServesTheNewFilesAndKeepsTheOldOnFailure) {
  auto created = TlsContext::Create(options_);
  ASSERT_TRUE(created);
  TlsContext& context = **created;
  const auto before = context.Current();

  // The certificate is renewed in place: the reload serves it, the old context lives on
  // for the connections that hold it.
  fs::copy_file(Path("b.crt"), Path("a.crt"), fs::copy_options::overwrite_existing);
  fs::copy_file(Path("b.key"), Path("a.key"), fs::copy_options::overwrite_existing);
  ASSERT_TRUE(context.Reload());
  EXPECT_EQ(ServedName(*context.Current()), "b");
  EXPECT_EQ(ServedName(*before), "a");

  // A half-written key: the reload fails and changes nothing.
  std::ofstream(Path("a.key"), std::ios::trunc) << "-----BEGIN PRIVATE KEY-----\n";
  const auto served = context.Current();
  auto failed = context.Reload();
  ASSERT_FALSE(failed);
  EXPECT_TRUE(failed.error().message.starts_with("--tls-key-file")) << failed.error().message;
  EXPECT_EQ(context.Current(), served);
}

}  // namespace
}  // namespace tally::tls
