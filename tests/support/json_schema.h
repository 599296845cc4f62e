// Validates a JSON document against a JSON Schema file (valijson), for the
// tests of every JSON the tools write.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>

namespace moetrace::testing {

inline nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// One "where: what" line per violation; empty when the document is valid.
inline std::vector<std::string> schema_errors(const nlohmann::json& doc, const std::string& schema_path) {
  const auto schema_doc = read_json_file(schema_path);
  valijson::Schema schema;
  valijson::SchemaParser parser;
  valijson::adapters::NlohmannJsonAdapter schema_adapter(schema_doc);
  parser.populateSchema(schema_adapter, schema);
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter doc_adapter(doc);
  std::vector<std::string> errors;
  if (!validator.validate(schema, doc_adapter, &results)) {
    valijson::ValidationResults::Error e;
    while (results.popError(e)) {
      std::string where;
      for (const auto& c : e.context) where += c;
      errors.push_back(where + ": " + e.description);
    }
  }
  return errors;
}

}  // namespace moetrace::testing
