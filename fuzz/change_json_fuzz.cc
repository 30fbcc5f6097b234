// libFuzzer target for the JSON change decoder (POST /v1/changes, CHANGES.PUSH): the input is
// a request body, decoded against two sources, posts (the blog model, every column read by a
// counter) and cells (a column of each type, one read by nobody). Properties:
//   - an error is kInvalidArgument and starts as documented: "change N: ", "invalid JSON: "
//     (with "near byte K", K within the body), "empty body: ", or the array rule's message;
//   - a decoded change has a known source, an id that is absent or not empty, and one or
//     two rows of the source's width, each cell NULL or of its column's type;
//   - the changes written back as a JSON array (every cell spelled anew, timestamps in the
//     key spelling) decode to the same changes.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/timestamp.h"
#include "engine/definitions/blog_model.h"
#include "engine/definitions/numeric.h"
#include "engine/derived/change_json.h"
#include "fuzz_check.h"
#include "key_parts.h"

namespace tally::derived {
namespace {

using definitions::SourceSchema;
using definitions::Type;
using definitions::Value;
using fuzz::Check;

const SourceSchema kCells{"cells",
                          {{"n", Type::kInt64},
                           {"b", Type::kBool},
                           {"t", Type::kText},
                           {"at", Type::kTimestamp},
                           {"unread", Type::kText}}};
const SourceView kPostsView{&definitions::testing::PostsSchema(),
                            {"c", "c", "c", "c", "c", "c", "c", "c", "c"}};
const SourceView kCellsView{&kCells, {"n_count", "b_count", "t_count", "at_count", ""}};

const SourceView* Lookup(std::string_view name) {
  if (name == "posts") return &kPostsView;
  if (name == kCells.name) return &kCellsView;
  return nullptr;
}

void AppendJsonString(std::string_view text, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (byte < 0x20) {
      out->append("\\u00");
      out->push_back(kHex[byte >> 4]);
      out->push_back(kHex[byte & 15]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

void AppendRow(const SourceSchema& schema, std::span<const Value> row, std::string* out) {
  out->push_back('{');
  for (size_t i = 0; i < row.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendJsonString(schema.columns[i].name, out);
    out->push_back(':');
    const Value& cell = row[i];
    switch (cell.type) {
      case Type::kNull:
        out->append("null");
        break;
      case Type::kInt64:
        out->append(std::to_string(cell.i));
        break;
      case Type::kBool:
        out->append(cell.i != 0 ? "true" : "false");
        break;
      case Type::kText:
        AppendJsonString(cell.s, out);
        break;
      case Type::kTimestamp:
        // The key spelling, which ParseTimestamp reads back for every int64.
        out->push_back('"');
        AppendTimestamp(cell.i, out);
        out->push_back('"');
        break;
      case Type::kNumeric:
        out->push_back('"');
        definitions::AppendDecimal(cell.i, cell.scale, out);
        out->push_back('"');
        break;
      case Type::kFloat: {
        char text[32];
        const auto end = std::to_chars(text, text + sizeof text, cell.float_value()).ptr;
        out->append(text, end);
        break;
      }
    }
  }
  out->push_back('}');
}

// The changes as one JSON array.
std::string Encode(std::span<const DecodedChange> changes) {
  std::string out = "[";
  for (const DecodedChange& change : changes) {
    if (out.size() > 1) out.push_back(',');
    out.append("{\"source\":");
    AppendJsonString(change.source->schema->name, &out);
    if (!change.id.empty()) {
      out.append(",\"id\":");
      AppendJsonString(change.id, &out);
    }
    for (const auto& [name, row] : {std::pair{"old", &change.old_row}, {"new", &change.new_row}}) {
      if (!row->has_value()) continue;
      out.append(",\"").append(name).append("\":");
      AppendRow(*change.source->schema, **row, &out);
    }
    out.push_back('}');
  }
  out.push_back(']');
  return out;
}

bool SameRow(const std::optional<std::vector<Value>>& a,
             const std::optional<std::vector<Value>>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  if (a->size() != b->size()) return false;
  for (size_t i = 0; i < a->size(); ++i) {
    if (!fuzz::SameValue((*a)[i], (*b)[i])) return false;
  }
  return true;
}

void CheckSame(std::span<const DecodedChange> a, std::span<const DecodedChange> b,
               std::string_view body) {
  Check(a.size() == b.size(), "the same number of changes", body);
  for (size_t i = 0; i < a.size(); ++i) {
    Check(a[i].source == b[i].source && a[i].id == b[i].id && SameRow(a[i].old_row, b[i].old_row) &&
              SameRow(a[i].new_row, b[i].new_row),
          "the same changes", body);
  }
}

void CheckError(const Error& error, size_t body_size) {
  const std::string& message = error.message;
  Check(error.code == ErrorCode::kInvalidArgument, "a refused body is kInvalidArgument", message);
  if (message.starts_with("invalid JSON: ")) {
    const size_t near = message.rfind(" near byte ");
    if (near != std::string::npos) {
      const size_t at = std::stoull(message.substr(near + 11));
      Check(at <= body_size, "invalid JSON is located within the body", message);
    }
    return;
  }
  Check(message.starts_with("change ") || message.starts_with("empty body: ") ||
            message.starts_with("a JSON array of changes must be the whole body"),
        "an error says which change or what of the body", message);
}

void CheckChanges(std::span<const DecodedChange> changes, std::string_view body) {
  for (const DecodedChange& change : changes) {
    Check(change.source == &kPostsView || change.source == &kCellsView, "a known source", body);
    Check(change.old_row || change.new_row, "a change has a row", body);
    const auto& columns = change.source->schema->columns;
    for (const auto* row : {&change.old_row, &change.new_row}) {
      if (!row->has_value()) continue;
      Check((*row)->size() == columns.size(), "a row has the source's width", body);
      for (size_t i = 0; i < columns.size(); ++i) {
        const Value& cell = (**row)[i];
        Check(cell.is_null() || cell.type == columns[i].type, "a cell has its column's type", body);
      }
    }
  }
}

// Decoders are kept across inputs, as a server's thread keeps its own: each decodes a body
// with the buffers of the previous one.
void FuzzBody(std::string_view body) {
  static ChangeDecoder first;
  static ChangeDecoder second;
  auto changes = first.Decode(body, Lookup);
  if (!changes) {
    CheckError(changes.error(), body.size());
    return;
  }
  CheckChanges(*changes, body);
  const std::string encoded = Encode(*changes);
  auto again = second.Decode(encoded, Lookup);
  Check(again.has_value(), "changes written back decode", encoded);
  CheckSame(*changes, *again, body);
}

}  // namespace
}  // namespace tally::derived

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tally::derived::FuzzBody(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
