#include "security/principal.h"

#include <unistd.h>

#include <memory>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "meshcast/v1/worker.grpc.pb.h"
#include "security/call_guard.h"
#include "security/cert_authority.h"
#include "security/tls_credentials.h"

namespace meshcast::security {
namespace {

using Kind = Principal::Kind;
using ::testing::HasSubstr;

constexpr char kAdminToken[] = "admin-token-0123456789";
constexpr char kAliceToken[] = "alice-token-0123456789";

TokenTable Tokens() {
  absl::StatusOr<TokenTable> table = TokenTable::Parse(
      std::string(kAdminToken) + " root admin\n" + kAliceToken +
          " alice user\n",
      "test");
  EXPECT_TRUE(table.ok()) << table.status();
  return *table;
}

Authenticator Auth() { return Authenticator(AuthOptions{false, Tokens()}); }

TEST(ResolveTest, TokensGiveTheirUserAndRole) {
  const Authenticator auth = Auth();
  EXPECT_EQ(*auth.Resolve(std::string("Bearer ") + kAdminToken, std::nullopt),
            (Principal{Kind::kAdmin, "root"}));
  EXPECT_EQ(*auth.Resolve(std::string("Bearer ") + kAliceToken, std::nullopt),
            (Principal{Kind::kUser, "alice"}));
}

TEST(ResolveTest, ATokenWinsOverACertificate) {
  EXPECT_EQ(*Auth().Resolve(std::string("Bearer ") + kAliceToken,
                            PeerCertificate{"w0", "worker"}),
            (Principal{Kind::kUser, "alice"}));
}

TEST(ResolveTest, WrongOrMalformedTokensAreUnauthenticated) {
  const Authenticator auth = Auth();
  for (const std::string& header :
       {std::string("Bearer wrong-token-0123456789"), std::string(kAdminToken),
        std::string("Basic ") + kAdminToken, std::string("Bearer ")}) {
    absl::StatusOr<Principal> p =
        auth.Resolve(header, PeerCertificate{"root", "admin"});
    EXPECT_EQ(p.status().code(), absl::StatusCode::kUnauthenticated) << header;
  }
}

TEST(ResolveTest, CertificatesGiveCnAndRoleFromOu) {
  const Authenticator auth = Auth();
  EXPECT_EQ(*auth.Resolve(std::nullopt, PeerCertificate{"w0", "worker"}),
            (Principal{Kind::kWorker, "w0"}));
  EXPECT_EQ(*auth.Resolve(std::nullopt, PeerCertificate{"bob", "user"}),
            (Principal{Kind::kUser, "bob"}));
  EXPECT_EQ(*auth.Resolve(std::nullopt, PeerCertificate{"ops", "admin"}),
            (Principal{Kind::kAdmin, "ops"}));
  // The controller's own certificate, or one without a role: nobody.
  for (const PeerCertificate& cert :
       {PeerCertificate{"meshcast-controller", "controller"},
        PeerCertificate{"x", ""}, PeerCertificate{"", "admin"}}) {
    absl::StatusOr<Principal> p = auth.Resolve(std::nullopt, cert);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(p.status().message(), HasSubstr("--token_file"));
  }
  EXPECT_EQ(auth.Resolve(std::nullopt, std::nullopt).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(ResolveTest, InsecureMakesEveryoneAnonymous) {
  const Authenticator auth(AuthOptions{true, Tokens()});
  EXPECT_EQ(*auth.Resolve(std::nullopt, std::nullopt), Principal{});
  EXPECT_EQ(*auth.Resolve(std::string("Bearer nonsense"), std::nullopt),
            Principal{});
}

TEST(IsControllerPeerTest, ComparesTheCommonName) {
  EXPECT_TRUE(IsControllerPeer(PeerCertificate{"meshcast-controller", ""},
                               "meshcast-controller"));
  EXPECT_FALSE(IsControllerPeer(PeerCertificate{"w0", "worker"},
                                "meshcast-controller"));
  EXPECT_FALSE(IsControllerPeer(std::nullopt, "meshcast-controller"));
  EXPECT_FALSE(IsControllerPeer(PeerCertificate{"", ""}, ""));
}

// A real TLS server: GetStatus answers with the caller the guard found.
class EchoService final : public v1::Worker::Service {
 public:
  explicit EchoService(const Authenticator* auth) : auth_(auth) {}
  grpc::Status GetStatus(grpc::ServerContext* context,
                         const v1::GetStatusRequest*,
                         v1::GetStatusResponse* response) override {
    Principal caller;
    // Any method the table lets users, admins... call: SubmitJob.
    grpc::Status status =
        Admit(auth_, *context, "/meshcast.v1.Controller/SubmitJob", &caller);
    if (!status.ok()) {
      status = Admit(auth_, *context, "/meshcast.v1.Controller/KvGet", &caller);
    }
    if (!status.ok()) return status;
    response->set_name(std::string(KindName(caller.kind)) + ":" + caller.name);
    return grpc::Status::OK;
  }

 private:
  const Authenticator* auth_;
};

class TlsCallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/principal_test." + std::to_string(getpid());
    ASSERT_EQ(system(("mkdir -p " + dir_).c_str()), 0);
    absl::StatusOr<KeyAndCert> ca = CreateCertificateAuthority("test CA");
    ASSERT_TRUE(ca.ok());
    ca_ = *ca;
    ASSERT_TRUE(WriteKeyAndCert(ca_, dir_ + "/ca.key", dir_ + "/ca.crt").ok());
    Issue("server", "controller", ca_);
    Issue("w0", "worker", ca_);
    absl::StatusOr<KeyAndCert> rogue = CreateCertificateAuthority("test CA");
    ASSERT_TRUE(rogue.ok());
    Issue("rogue", "worker", *rogue);

    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
        MakeServerCredentials(Files("server"),
                              ClientCertificates::kRequestAndVerify);
    ASSERT_TRUE(creds.ok()) << creds.status();
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", *creds, &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    system(("rm -rf " + dir_).c_str());
  }

  void Issue(const std::string& name, const std::string& ou,
             const KeyAndCert& ca) {
    CertRequest request;
    request.common_name = name;
    request.organizational_unit = ou;
    request.ip_addresses = {"127.0.0.1"};
    absl::StatusOr<KeyAndCert> pair = IssueCertificate(ca, request);
    ASSERT_TRUE(pair.ok()) << pair.status();
    ASSERT_TRUE(WriteKeyAndCert(*pair, dir_ + "/" + name + ".key",
                                dir_ + "/" + name + ".crt")
                    .ok());
  }
  TlsFiles Files(const std::string& name) {
    return TlsFiles{dir_ + "/" + name + ".crt", dir_ + "/" + name + ".key",
                    dir_ + "/ca.crt"};
  }

  // The caller the server saw, or the call's error.
  absl::StatusOr<std::string> Call(const TlsFiles& files,
                                   const std::string& token) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
        MakeChannelCredentials(files, token);
    if (!creds.ok()) return creds.status();
    auto stub = v1::Worker::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), *creds));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    v1::GetStatusResponse response;
    const grpc::Status status =
        stub->GetStatus(&context, v1::GetStatusRequest(), &response);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return response.name();
  }

  std::string dir_;
  KeyAndCert ca_;
  Authenticator auth_ = Auth();
  EchoService service_{&auth_};
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(TlsCallTest, ExtractsPrincipalsFromRealCalls) {
  const TlsFiles ca_only{"", "", dir_ + "/ca.crt"};
  EXPECT_EQ(*Call(ca_only, kAdminToken), "admin:root");
  EXPECT_EQ(*Call(ca_only, kAliceToken), "user:alice");
  EXPECT_EQ(*Call(Files("w0"), ""), "worker:w0");
  EXPECT_EQ(Call(ca_only, "").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Call(ca_only, "not-a-token-0123456789").status().code(),
            absl::StatusCode::kUnauthenticated);
  // The controller's certificate has no client role here.
  EXPECT_EQ(Call(Files("server"), "").status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(TlsCallTest, ACertificateOfAnotherCaCannotConnect) {
  absl::StatusOr<std::string> result = Call(
      TlsFiles{dir_ + "/rogue.crt", dir_ + "/rogue.key", dir_ + "/ca.crt"},
      "");
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(TlsCallTest, APlaintextClientCannotConnect) {
  auto stub = v1::Worker::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                          grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(3));
  v1::GetStatusResponse response;
  EXPECT_EQ(stub->GetStatus(&context, v1::GetStatusRequest(), &response)
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace meshcast::security
