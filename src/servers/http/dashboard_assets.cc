#include "servers/http/dashboard_assets.h"

namespace tally::http {
namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

const DashboardAsset* FindDashboardAsset(std::string_view path) {
  for (const DashboardAsset& asset : DashboardAssets()) {
    if (asset.path == path) return &asset;
  }
  return nullptr;
}

bool EtagMatches(std::string_view if_none_match, std::string_view etag) {
  if (Trim(if_none_match) == "*") return true;
  // Entity tags are quoted strings without commas inside, so ',' separates the list.
  while (!if_none_match.empty()) {
    const size_t comma = if_none_match.find(',');
    std::string_view tag = Trim(if_none_match.substr(0, comma));
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (!tag.empty() && tag == etag) return true;
    if (comma == std::string_view::npos) break;
    if_none_match.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace tally::http
