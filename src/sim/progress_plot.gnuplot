# The progress plot of `weightcast sim --out DIR --plot` and of bench/cluster (report.py): the
# completion-time CDF and the fleet's progress over time, side by side. One script for both, so
# that a simulated and a measured rollout are drawn the same way. The binary embeds this file
# (cmake wc_embed_asset); the benchmark runs it from the source tree.
#
#   gnuplot -e "completion='completion.csv'; progress='progress.csv'; output='plot.png'; \
#               receivers=15; bound=8.2; title='...'; progress_title='bytes verified'" \
#           src/sim/progress_plot.gnuplot
#
# completion: CSV with a header, node,role,completed_at_s,bytes_in,bytes_out; the first data row
#             is the source (not drawn); an empty completed_at_s is a node that never finished.
# progress:   CSV with a header, t_s,fraction,complete (fraction of the work done at t_s).
# receivers:  rows after the source (the CDF's denominator). bound: the lower bound in seconds
#             drawn as a dashed line (0 or unset: none). title, progress_title: optional labels.
# steps:      1 draws progress as a step function (a count of hosts done), 0 (default) as lines.
if (!exists("bound")) bound = 0
if (!exists("title")) title = ""
if (!exists("progress_title")) progress_title = "bytes verified"
if (!exists("steps")) steps = 0
set terminal pngcairo size 1200,450
set output output
set datafile separator ','
set key bottom right
set grid
set multiplot layout 1,2 title title
set title 'completion time CDF'
set xlabel 'seconds'
set ylabel 'fraction of nodes'
set xrange [0:*]
set yrange [0:1.05]
if (bound > 0) set arrow 1 from bound,0 to bound,1 nohead dt 2
plot completion skip 2 using 3:(1.0/receivers) smooth cumulative title 'receivers'
unset arrow 1
set title 'progress'
set ylabel 'fraction'
if (steps) {
  plot progress skip 1 using 1:2 with steps title progress_title
} else {
  plot progress skip 1 using 1:2 with lines title progress_title
}
unset multiplot
