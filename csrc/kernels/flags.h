// Picking a kernel template's instance from run-time flags in one call, on either back end:
// with_flags(run, f0, f1, ...) calls run(std::bool_constant<f0>{}, std::bool_constant<f1>{}, ...), so
// `run` names the instance as kernel<decltype(a)::value, decltype(b)::value> once, not per flag combination.
#pragma once

#include <type_traits>

namespace pycomm {

template <typename Run>
void with_flags(Run run) {
  run();
}

template <typename Run, typename... Flags>
void with_flags(Run run, bool first, Flags... rest) {
  if (first)
    with_flags([&](auto... flags) { run(std::true_type{}, flags...); }, rest...);
  else
    with_flags([&](auto... flags) { run(std::false_type{}, flags...); }, rest...);
}

}  // namespace pycomm
