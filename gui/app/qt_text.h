// std::string -> QString, the one conversion every panel of the viewer needs.
#pragma once

#include <QString>
#include <string>

namespace moetrace::gui {

inline QString qs(const std::string& s) { return QString::fromStdString(s); }

}  // namespace moetrace::gui
