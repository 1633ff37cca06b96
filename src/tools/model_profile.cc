#include "tools/model_profile.h"

#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "tools/embedded_profiles.h"

namespace softhca::tools {

namespace {

// TOML table name -> the prefix of its keys in sim::profile_keys().
constexpr std::string_view kTables[] = {"cpu", "pcie", "hca", "ib", "switch"};

std::string where(std::string_view origin, const toml::source_region& r) {
  std::string s(origin);
  if (r.begin.line != 0) s += ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
  return s;
}

[[noreturn]] void error(std::string_view origin, const toml::node& n, const std::string& msg) {
  throw ProfileError(where(origin, n.source()) + ": " + msg);
}

std::string known_keys_of(std::string_view table) {
  std::string out;
  for (const sim::ProfileKey& k : sim::profile_keys()) {
    if (k.key.substr(0, table.size() + 1) == std::string(table) + ".") {
      if (!out.empty()) out += ", ";
      out += k.key.substr(table.size() + 1);
    }
  }
  return out;
}

void set_from_node(sim::MachineProfile& p, std::string_view origin, const std::string& key, const toml::node& v) {
  const sim::ProfileKey* k = sim::find_profile_key(key);
  if (k == nullptr) {
    const std::string table = key.substr(0, key.find('.'));
    error(origin, v, "unknown key \"" + key + "\" (known in [" + table + "]: " + known_keys_of(table) + ")");
  }
  std::optional<std::string> err;
  if (k->kind == sim::ProfileKey::Kind::kBool) {
    if (!v.is_boolean()) error(origin, v, key + " must be true or false");
    err = sim::set_profile_number(p, key, *v.value<bool>() ? 1 : 0);
  } else if (v.is_integer()) {
    err = sim::set_profile_number(p, key, static_cast<double>(*v.value<int64_t>()));
  } else if (v.is_floating_point()) {
    err = sim::set_profile_number(p, key, *v.value<double>());
  } else {
    error(origin, v, key + " must be a number");
  }
  if (err) error(origin, v, *err);
}

}  // namespace

sim::MachineProfile parse_profile(std::string_view text, std::string_view origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw ProfileError(where(origin, e.source()) + ": " + std::string(e.description()));
  }
  sim::MachineProfile p;
  for (const auto& [name, node] : root) {
    const std::string key(name.str());
    if (key == "name" || key == "description") {
      if (!node.is_string()) error(origin, node, key + " must be a string");
      (key == "name" ? p.name : p.description) = *node.value<std::string>();
      continue;
    }
    bool known_table = false;
    for (std::string_view t : kTables) known_table = known_table || key == t;
    if (!known_table) {
      error(origin, node, "unknown key \"" + key + "\" (a profile has name, description and the tables [cpu], "
                              "[pcie], [hca], [ib], [switch])");
    }
    const toml::table* table = node.as_table();
    if (table == nullptr) error(origin, node, "\"" + key + "\" must be a table ([" + key + "])");
    for (const auto& [sub, value] : *table) set_from_node(p, origin, key + "." + std::string(sub.str()), value);
  }
  if (auto err = sim::validate(p)) throw ProfileError(std::string(origin) + ": " + *err);
  return p;
}

sim::MachineProfile load_profile(std::string_view name_or_path) {
  const std::string_view text = embedded_profile_text(name_or_path);
  if (!text.empty()) return parse_profile(text, "embedded:" + std::string(name_or_path));
  std::ifstream in{std::string(name_or_path)};
  if (!in) {
    std::string names;
    for (std::string_view n : embedded_profile_names()) names += (names.empty() ? "" : ", ") + std::string(n);
    throw ProfileError("profile \"" + std::string(name_or_path) + "\": neither a built-in profile (" + names +
                       ") nor a readable file");
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  return parse_profile(buf.str(), name_or_path);
}

std::vector<std::string_view> embedded_profile_names() {
  std::vector<std::string_view> out;
  for (const EmbeddedProfile& e : kEmbeddedProfiles) out.push_back(e.name);
  return out;
}

std::string_view embedded_profile_text(std::string_view name) {
  for (const EmbeddedProfile& e : kEmbeddedProfiles) {
    if (e.name == name) return e.toml;
  }
  return {};
}

void apply_override(sim::MachineProfile& p, std::string_view assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos) {
    throw ProfileError("--set \"" + std::string(assignment) + "\": expected KEY=VALUE, e.g. pcie.rtt_ns=250");
  }
  const std::string_view key = assignment.substr(0, eq);
  const std::string_view value = assignment.substr(eq + 1);
  if (auto err = sim::set_profile_what_if(p, key, value)) throw ProfileError("--set " + std::string(assignment) + ": " + *err);
  if (auto err = sim::validate(p)) throw ProfileError("--set " + std::string(assignment) + ": " + *err);
}

std::string describe_profile(const sim::MachineProfile& p) {
  std::string out = "# " + p.name + ": " + p.description + "\n";
  for (const sim::ProfileKey& k : sim::profile_keys()) {
    std::string line = std::string(k.key) + " = " + sim::profile_value_text(p, k);
    if (line.size() < 40) line.append(40 - line.size(), ' ');
    line += "# ";
    if (!k.unit.empty()) line += std::string(k.unit) + ", ";
    line += std::string(k.source);
    out += line + "\n";
  }
  return out;
}

}  // namespace softhca::tools
