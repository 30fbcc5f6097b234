// The OpenAPI 3.1 description of the HTTP API (docs/openapi.json), compiled into tallyd and
// served at GET /openapi.json. tests/e2e/test_openapi.py holds the document and the routes
// (routes.cc's table) to each other: every route described, every response valid.
#pragma once

#include <string_view>

namespace tally::http {

// The document's bytes, exactly as committed (static storage). Defined by the
// openapi_data.cc that CMake writes from docs/openapi.json (openapi_data.cc.in).
std::string_view OpenApiDocument();

}  // namespace tally::http
