// The table of bad inputs the conformance suite tries: each bad-input test records one row (the
// input, what real verbs give, what softhca answered, whether they agree), and a full run writes
// all rows as a Markdown table to the file SOFTHCA_BAD_INPUT_TABLE names (nothing when unset).
// Rows keep the order in which the tests ran.
#pragma once

#include <string>

namespace softhca::conformance {

void record(const std::string& input, const std::string& expected, const std::string& observed, bool agrees);
// A row whose observation must read exactly as the expectation; also checked with EXPECT_EQ. The
// note, when given, is shown after the expectation in the table (where the answer comes from).
void expect_row(const std::string& input, const std::string& expected, const std::string& observed,
                const std::string& note = "");

}  // namespace softhca::conformance
