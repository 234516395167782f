#include "security/authorizer.h"

#include "absl/strings/str_cat.h"

namespace meshcast::security {
namespace {

struct Rule {
  absl::string_view method;
  bool admin;
  bool user;
  bool worker;
  bool controller;
};

// clang-format off
constexpr Rule kRules[] = {
    //                                          admin  user   worker ctrl
    {"/meshcast.v1.Controller/RegisterWorker",  false, false, true,  false},
    {"/meshcast.v1.Controller/Heartbeat",       false, false, true,  false},
    {"/meshcast.v1.Controller/ReportProgress",  false, false, true,  false},
    {"/meshcast.v1.Controller/KvSet",           false, false, true,  false},
    {"/meshcast.v1.Controller/KvGet",           false, false, true,  false},
    {"/meshcast.v1.Controller/SubmitJob",       true,  true,  false, false},
    {"/meshcast.v1.Controller/GetJob",          true,  true,  false, false},
    {"/meshcast.v1.Controller/ListJobs",        true,  true,  false, false},
    {"/meshcast.v1.Controller/WatchJob",        true,  true,  false, false},
    {"/meshcast.v1.Controller/CancelJob",       true,  true,  false, false},
    {"/meshcast.v1.Controller/Plan",            true,  true,  false, false},
    {"/meshcast.v1.Controller/GetCluster",      true,  false, false, false},
    {"/meshcast.v1.Worker/RunTask",             false, false, false, true},
    {"/meshcast.v1.Worker/AbortTask",           false, false, false, true},
    {"/meshcast.v1.Worker/GetStatus",           false, false, false, true},
};
// clang-format on

bool Allows(const Rule& rule, Principal::Kind kind) {
  switch (kind) {
    case Principal::Kind::kAnonymous:
      return true;
    case Principal::Kind::kAdmin:
      return rule.admin;
    case Principal::Kind::kUser:
      return rule.user;
    case Principal::Kind::kWorker:
      return rule.worker;
    case Principal::Kind::kController:
      return rule.controller;
  }
  return false;
}

}  // namespace

absl::Status Authorize(absl::string_view method, const Principal& principal) {
  for (const Rule& rule : kRules) {
    if (rule.method != method) continue;
    if (Allows(rule, principal.kind)) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat(method, " is not allowed to a caller of kind ",
                     KindName(principal.kind)));
  }
  return absl::PermissionDeniedError(
      absl::StrCat(method.substr(0, 80), " has no authorization rule"));
}

bool CanAccessJob(const Principal& principal, absl::string_view owner) {
  switch (principal.kind) {
    case Principal::Kind::kAnonymous:
    case Principal::Kind::kAdmin:
      return true;
    case Principal::Kind::kUser:
      return !owner.empty() && owner == principal.name;
    case Principal::Kind::kWorker:
    case Principal::Kind::kController:
      return false;
  }
  return false;
}

bool CanAccessEveryJob(const Principal& principal) {
  return principal.kind == Principal::Kind::kAnonymous ||
         principal.kind == Principal::Kind::kAdmin;
}

}  // namespace meshcast::security
