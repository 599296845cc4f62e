// A table handed to Python as a dict of columns (moetrace_bindings.cc):
// filled row by row without the GIL, converted with it.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <deque>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace moetrace::python {

namespace py = pybind11;

// Columns filled row by row without the GIL: the first row names them, every
// later row gives the same names in the same order.
class Table {
 public:
  template <class T>
  void put(std::string_view name, const T& v) {
    if (rows_ == 0) {
      columns_.push_back({std::string(name), Values(std::in_place_type<std::vector<Cell<T>>>)});
    } else if (pos_ >= columns_.size() || columns_[pos_].name != name) {
      throw std::logic_error("moetrace: table column out of order: " + std::string(name));
    }
    std::get<std::vector<Cell<T>>>(columns_[pos_++].values).push_back(Cell<T>(v));
  }
  void end_row() {
    pos_ = 0;
    ++rows_;
  }

  // With the GIL.
  py::dict to_python() const {
    py::dict d;
    for (const auto& c : columns_) {
      std::visit(
          [&](const auto& v) {
            using V = typename std::decay_t<decltype(v)>::value_type;
            if constexpr (std::is_same_v<V, std::string>) {
              py::list l(v.size());
              for (std::size_t i = 0; i < v.size(); ++i) l[i] = py::str(v[i]);
              d[py::str(c.name)] = std::move(l);
            } else if constexpr (std::is_same_v<V, std::uint8_t>) {
              py::array_t<bool> a(static_cast<py::ssize_t>(v.size()));
              auto* out = a.mutable_data();
              for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i] != 0;
              d[py::str(c.name)] = std::move(a);
            } else {
              d[py::str(c.name)] = py::array_t<V>(static_cast<py::ssize_t>(v.size()), v.data());
            }
          },
          c.values);
    }
    return d;
  }

 private:
  // bool -> uint8 (numpy bool), integers -> int64, floating -> double, text -> str.
  template <class T>
  using Cell = std::conditional_t<
      std::is_same_v<T, bool>, std::uint8_t,
      std::conditional_t<std::is_integral_v<T>, std::int64_t,
                         std::conditional_t<std::is_floating_point_v<T>, double, std::string>>>;
  using Values = std::variant<std::vector<std::int64_t>, std::vector<double>, std::vector<std::string>,
                              std::vector<std::uint8_t>>;
  struct Column {
    std::string name;
    Values values;
  };
  std::deque<Column> columns_;
  std::size_t pos_ = 0, rows_ = 0;
};

}  // namespace moetrace::python
