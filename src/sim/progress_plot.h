// The gnuplot script that draws a rollout's progress (src/sim/progress_plot.gnuplot, embedded by
// CMake): `weightcast sim --plot` writes it after the variables it reads; bench/cluster runs the
// same file from the source tree.
#pragma once

#include <string_view>

namespace weightcast::assets {
extern const std::string_view kProgressPlotGnuplot;
}  // namespace weightcast::assets
