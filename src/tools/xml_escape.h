// Escaping text for the SVG files the tools write (model plots, sequence diagrams).
#pragma once
#include <string>
#include <string_view>

namespace softhca::tools {

inline std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace softhca::tools
