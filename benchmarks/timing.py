"""The benchmarks' timing helpers now live in qgemm.bench.timing (shipped with the package); this
module keeps `from timing import ...` in the diag_*/prebuild_* scripts working."""
from qgemm.bench.timing import *  # noqa: F401,F403
from qgemm.bench.timing import bench, bench_graph, bench_graph_rotating, copy_bandwidth  # noqa: F401
