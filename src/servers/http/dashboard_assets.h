// The web dashboard's files (dashboard/, built by `make`), compiled into tallyd: the HTTP
// API serves them at GET / and GET /assets/... from memory, with no file path at run time.
//
// The table itself is generated at build time (cmake/embed_dashboard.cmake) from the
// dashboard build's manifest; this header is its contract.
#pragma once

#include <span>
#include <string_view>

namespace tally::http {

// One embedded file. Every view points into static storage.
struct DashboardAsset {
  std::string_view path;           // the URL path: "/" or "/assets/app-<content hash>.js"
  std::string_view content_type;   // "text/html; charset=utf-8"
  std::string_view etag;           // strong and quoted: "\"<first 128 bits of its SHA-256>\""
  std::string_view cache_control;  // "no-cache" for the page; a year for content-named files
  std::string_view body;
};

// Every embedded file (defined by the generated dashboard_assets_data.cc).
std::span<const DashboardAsset> DashboardAssets();

// The file served at `path` (exact match), or nullptr.
const DashboardAsset* FindDashboardAsset(std::string_view path);

// True when an If-None-Match header value names `etag` or is "*": the client's copy is
// current and the answer is 304. A list ("a", W/"b") matches if any member does; the
// comparison is the weak one RFC 9110 (13.1.2) asks for, so W/"x" matches "x".
bool EtagMatches(std::string_view if_none_match, std::string_view etag);

}  // namespace tally::http
