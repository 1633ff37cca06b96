// Machine profiles in TOML (profiles/*.toml, docs/timing-model.md): loading with clear errors, the
// profiles built into the binary, and overrides of single values (`--set pcie.rtt_ns=250`).
// A profile file holds `name`, `description` and the tables [cpu], [pcie], [hca], [ib], [switch]
// whose keys are those of sim::profile_keys(); a key it leaves out keeps the built-in default.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sim/machine_profile.h"

namespace softhca::tools {

// What went wrong in a profile, with where: "FILE:LINE:COLUMN: message" when the place is known.
class ProfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr std::string_view kDefaultProfileName = "thunderx2-cx4-edr";

// Parses TOML text; `origin` names it in error messages (a file path, or "embedded:NAME").
sim::MachineProfile parse_profile(std::string_view toml, std::string_view origin);
// A built-in profile name (see embedded_profile_names()) or the path of a TOML file.
sim::MachineProfile load_profile(std::string_view name_or_path);

std::vector<std::string_view> embedded_profile_names();
// The TOML text of a built-in profile; empty if there is none of that name.
std::string_view embedded_profile_text(std::string_view name);

// Applies "KEY=VALUE" (e.g. "pcie.rtt_ns=250"); throws ProfileError on a bad key or value.
void apply_override(sim::MachineProfile& p, std::string_view assignment);

// Every parameter as "key = value  # unit, source" lines, for `softhca model --show-profile`.
std::string describe_profile(const sim::MachineProfile& p);

}  // namespace softhca::tools
